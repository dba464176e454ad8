"""What benchmarks/serving.py is made of besides its orchestration."""
