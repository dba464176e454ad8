"""The TrainingJob operator: Kubernetes TrainingJob objects submitted to, cancelled at and reported from the master."""
