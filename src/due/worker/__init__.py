"""The worker: claims, runs and acknowledges jobs."""
