"""Beam option presets (plain text files of flags): see README.md here."""
