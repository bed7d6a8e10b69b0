"""sparkimg's private ground floor, by domain: ``fs`` (files read from outside, tars, trees, hashing,
atomic writes), ``net`` (bounded HTTP, the registry client, PyPI, git mirrors), byte sizes, default
locations and the time format. It imports no stage; every stage may import it."""
