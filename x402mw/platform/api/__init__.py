"""The merchant REST API: one module per resource, plus the conventions every endpoint shares."""
