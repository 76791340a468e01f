"""Rendering only: terminal tables, JSON and charts of result objects. Nothing here computes."""
