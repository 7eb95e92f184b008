"""Model builders. `MODELS`: config kind -> builder (a function or class taking keyword arguments)."""

from .ast import AST

MODELS = {
    "ast": AST,
}
