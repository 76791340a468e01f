"""Rendering only: rich tables, JSON and charts over the library's result objects. Nothing here computes."""
