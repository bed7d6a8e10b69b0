"""Files: reading what sparkimg did not write (bounded, regular files only), tars, trees as
content, hashing, and writes that are whole or absent."""
