"""What benchmarks/peers.py is made of besides its orchestration."""
