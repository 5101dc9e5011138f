"""The DRF peer of `make bench`: POST /plants as a DRF tutorial would write it. Never deployed."""
