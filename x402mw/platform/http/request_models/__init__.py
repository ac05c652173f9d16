"""The request bodies the surfaces parse: each pydantic model is the API's body of an operation (its
schema is the OpenAPI document's) and the form the dashboard reads into it, so that a page refuses
what the API refuses, with the same words."""
