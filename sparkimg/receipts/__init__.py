"""Signed image receipts: the statement (``statement``), writing it (``emit``), recipes
(``recipe``), checking it (``verify``) and the serving arguments it implies (``runargs``)."""
