"""The django-ninja peer of `make bench`: POST /plants as django-ninja's tutorial writes it. Never deployed."""
