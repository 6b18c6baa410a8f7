"""Sweeps: the bench engine, jobs per grid point, shards and the local, Slurm and Ray executors."""
