"""Validation: published measurements (training runs, energy, serving) beside the model's
predictions, and the honest fits of a preset's unmeasured parameters. The ``phaze validate``
commands render what these modules return."""
