"""The build stage: bounded compiles (``compile``), the architecture audit (``audit``), job
budgets (``bounds``), image assembly (``assemble``) and the whole build (``image``)."""
