#!/usr/bin/env python
"""Run the example Django project: python examples/django_project/manage.py runserver"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
