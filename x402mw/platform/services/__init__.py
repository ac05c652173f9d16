"""Business logic, independent of HTTP: merchants and keys, agent endpoints, settlement, metering."""
