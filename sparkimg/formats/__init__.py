"""One module per file format sparkimg reads or writes: frozen typed models with
``from_json``/``to_json``, their schema id and their validation, and no I/O."""
