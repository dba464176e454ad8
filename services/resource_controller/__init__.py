"""Resource controller service: launches, watches and releases executors through a scheduler backend."""
