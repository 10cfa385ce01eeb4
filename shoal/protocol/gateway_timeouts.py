"""The gateway's default time limits on a request, in seconds.

Two places state them and must agree: ``shoal gateway``'s flags and the InferenceDeployment CRD's
``spec.gateway.timeouts`` defaults, which the operator turns back into those flags. They live here, below both,
so the operator needs nothing from the gateway package (import-linter's independence contract).
"""

DEFAULT_CONNECT_TIMEOUT_S = 2.0
DEFAULT_FIRST_TOKEN_TIMEOUT_S = 60.0
DEFAULT_INTER_TOKEN_TIMEOUT_S = 30.0
DEFAULT_REQUEST_TIMEOUT_S = 600.0
