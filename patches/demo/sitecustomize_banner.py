# sparkimg demo patch: a file baked into the image at the path mounts.txt names.
BANNER = "patched by sparkimg demo patch set"
