"""Modal dialogs. Every one opens with Cancel focused, and Escape cancels."""
