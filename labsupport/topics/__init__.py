"""Helpers of one lesson each, named after the concept they teach (the README's table lists them)."""
