"""The container engine: ``docker`` (the one adapter, client CLI and API socket), ``socket_api`` (the
Engine API over its unix socket), ``podman`` (where its CLI differs), ``ownership`` (owner labels
and leases of the containers sparkimg starts)."""
