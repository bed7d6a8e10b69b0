"""``sparkimg doctor``: what this machine can do, checked (``checks``)."""
