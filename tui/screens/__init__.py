"""Full screens: help."""
