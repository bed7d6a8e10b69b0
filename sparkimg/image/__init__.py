"""The image stage: bounded compiles (``compile``), the architecture audit (``audit``), job budgets
(``bounds``), the layers and the image sparkimg writes (``layer``, ``assemble``) and the whole
build stage (``build``)."""
