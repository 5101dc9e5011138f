"""Other frameworks serving the same contract, for `make bench` to measure beside the service."""
