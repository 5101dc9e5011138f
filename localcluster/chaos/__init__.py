"""`make chaos`: make cluster's topology under load while a nemesis draws overlapping faults from a seed, then a checker."""
