"""What one model call costs on our side: `agentplatform.llm.client.complete()` against
the offline planner (in-process transport, no network), the same code path as a real endpoint.

Interleaved per iteration, with the same request (the scenario's first turn: the system prompt, a
user asking to cancel an order, the four catalog tools):

- ours, streamed: `complete()` as the loop calls it (LLM_STREAM's default), chunks read as decoded
  JSON and assembled by `agentplatform.llm.assembly.assemble_stream`;
- ours, not streamed: `complete(stream=False)`;
- the stream alone, twice, in the caller's thread (no deadline thread, no assembly): read through
  the SDK's typed chunk class (`openai.Stream[ChatCompletionChunk]`, what `complete()` used before)
  and as decoded JSON (`openai.Stream[object]`, what it uses now); their difference is the cost of
  building a model per chunk.

No database is used. Usage: python bench/model_call.py [--iterations 2000] [--warmup 200]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentplatform.settings")
    os.environ["LLM_API_KEY"] = ""  # the offline planner
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    import django

    django.setup()
    import openai
    from openai.types.chat import ChatCompletionChunk

    import _common
    from agentplatform.llm import client as llm
    from agentplatform.llm import factory as llm_factory
    from agentplatform.runtime.prompt import SYSTEM_PROMPT
    from tools.registry import registry

    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": "Please cancel order A202607290001 because the customer changed their mind."}]
    tools = [spec.definition() for spec in registry.all()]
    sdk = llm_factory.get_client()

    def ours_streamed():
        return llm.complete(messages=messages, tools=tools, stream=True, on_text=lambda text: None)

    def ours_whole():
        return llm.complete(messages=messages, tools=tools, stream=False, on_text=lambda text: None)

    def chunks(chunk_class):
        with sdk.post("/chat/completions", body={"model": "offline", "messages": messages, "tools": tools,
                                                 "stream": True},
                      cast_to=chunk_class, stream=True, stream_cls=openai.Stream[chunk_class]) as stream:
            return sum(1 for _ in stream)

    def sdk_models():
        return chunks(ChatCompletionChunk)

    def sdk_json():
        return chunks(object)

    cases = [("ours, streamed (JSON chunks)", ours_streamed), ("ours, not streamed", ours_whole),
             ("stream only, SDK chunk models", sdk_models), ("stream only, JSON chunks", sdk_json)]
    turn = ours_streamed()
    print("== one offline model call through the openai SDK")
    print(f"command : python bench/model_call.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"code    : {_common._git_revision()}; openai {openai.__version__}; {_common.load_average()}")
    print(f"request : {len(messages)} messages, {len(tools)} tools; answer: {len(turn.tool_calls)} tool call(s), "
          f"{sdk_models()} stream chunks")
    print()
    times: dict[str, list[float]] = {label: [] for label, _ in cases}
    for i in range(args.warmup + args.iterations):
        for label, call in cases:
            started = time.perf_counter()
            call()
            if i >= args.warmup:
                times[label].append(_common.elapsed_ms(started))
    for label, _ in cases:
        print(_common.row(label, times[label]))
    print(f"\nend     : {_common.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
