"""What the follower and the box-side listing tools read on the box, standard library
only: a project's runs (``trainer runs``), the log's tail, older parts and search
(``trainer log``), the run's side files (hub.json, guard.json, the weights' identity),
GPU figures, and what the laptop needs to know about this install."""
