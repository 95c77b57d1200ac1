from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="Report",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("title", models.CharField(max_length=200)),
                ("images", models.PositiveIntegerField(default=3)),
                ("status", models.CharField(default="queued", max_length=20)),
                ("summary", models.TextField(blank=True)),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("finished", models.DateTimeField(blank=True, null=True)),
            ],
            options={"ordering": ("-created",)},
        ),
    ]
