"""Integrations with other training and evaluation stacks over process boundaries."""
