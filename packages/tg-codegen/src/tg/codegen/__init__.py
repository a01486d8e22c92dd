"""tg.codegen: code generation: scheduler, kernel optimiser, lowering, linearizer and renderers.

Tensor graph -> `create_schedule` -> a LINEAR of CALLs of kernel ASTs -> `get_program(ast, renderer)` ->
`ProgramSpec` (source + launch information). Importing this package does no work: no compiling, no devices.
"""

from tg.codegen.__about__ import __version__
from tg.codegen.linearize import linearize
from tg.codegen.lower import lower_kernel
from tg.codegen.program import ProgramSpec, get_program
from tg.codegen.render.cstyle import ClangRenderer, CStyleLanguage
from tg.codegen.render.python import PythonRenderer
from tg.codegen.render.renderer import Renderer
from tg.codegen.schedule import Schedule, create_schedule

__all__ = [
    "CStyleLanguage",
    "ClangRenderer",
    "ProgramSpec",
    "PythonRenderer",
    "Renderer",
    "Schedule",
    "__version__",
    "create_schedule",
    "get_program",
    "linearize",
    "lower_kernel",
]
