from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0007_merge_edit_decisions_and_tool_owner'),
    ]

    operations = [
        migrations.AddField(
            model_name='auditevent',
            name='execution',
            field=models.JSONField(blank=True, help_text='The process (host:pid) and the run lease under which the call ran.', null=True),
        ),
    ]
