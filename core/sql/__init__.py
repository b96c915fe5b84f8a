"""SQL helpers for the hot path, by topic: `statements` (single-row INSERT/UPDATE), `select`
(prebuilt SELECTs and compare-and-set UPDATEs), `batches` (several writes in one round
trip), `transactions` (retries, usability, the pooled connection) and `values` (field
conversions and the statement cache they share)."""
