"""Renderers: turn a Result into text for a person (terminal, Markdown) or a program (JSON)."""
