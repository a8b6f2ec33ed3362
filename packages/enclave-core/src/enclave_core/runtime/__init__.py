"""What every Enclave process needs: options from flags and environment, structured logs, probes and metrics,
leader election, an API client, and a graceful shutdown. A component's ``__main__`` is a few lines on top."""
