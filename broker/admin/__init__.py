"""Admin codes: GET_BROKER_RUNTIME_INFO (28)."""
