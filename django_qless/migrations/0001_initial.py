"""Create the permissions of the unmanaged dashboard model (no table)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Dashboard",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "queue dashboard",
                "verbose_name_plural": "queue dashboard",
                "permissions": (
                    ("view_dashboard", "Can view the qless dashboard"),
                    ("manage_jobs", "Can act on qless queues, jobs, workers and config"),
                ),
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
