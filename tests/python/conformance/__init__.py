"""Op-conformance cases: each builds a small network, runs it on tensoracle and compares with PyTorch."""
