"""Renderers: `renderer.Renderer` (the base), `cstyle.ClangRenderer` (C), `python.PythonRenderer` (PYTHON)."""
