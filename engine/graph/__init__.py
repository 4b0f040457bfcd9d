"""Offline chunk graph: edge signals, fusion, spectrum."""
