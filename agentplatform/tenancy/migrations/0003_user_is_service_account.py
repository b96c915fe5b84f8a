from django.db import migrations, models


class Migration(migrations.Migration):
    """Service accounts: a program's account, never an approver (docs/roles.md)."""

    dependencies = [
        ("tenancy", "0002_tenantgroup"),
    ]

    operations = [
        migrations.AddField(
            model_name="user",
            name="is_service_account",
            field=models.BooleanField(
                default=False,
                help_text="A program's account (an integration), not a person: no password sign-in, may use tools, "
                          "can never approve. 服务账号：供程序集成使用，不能登录网页，永远不能审批。",
                verbose_name="service account"),
        ),
    ]
