"""ListOps (Nangia & Bowman 2018; the Long Range Arena task), generated deterministically from a seed.

An example is a nested prefix expression over digits, e.g. `[MAX 2 9 [MIN 4 7 ] 0 ]`, and its value (0-9),
the class to predict. Operators: MAX, MIN, MED (the median, rounded down) and SM (sum mod 10).
Tokens are separated by spaces: `[MAX`, `[MIN`, `[MED`, `[SM`, `]` and the ten digits (`VOCAB`).

Lengths are controlled by a token budget: each example draws a target length in [min_len, max_len] and the
generator splits it among operator arguments, so long settings (LRA: 500-2000 tokens) are cheap to generate.
"""

from __future__ import annotations

import random
import statistics

OPS = {
    "[MAX": max,
    "[MIN": min,
    "[MED": lambda args: int(statistics.median(args)),
    "[SM": lambda args: sum(args) % 10,
}
CLOSE = "]"
PAD = "<pad>"
VOCAB = (PAD, *OPS, CLOSE, *(str(d) for d in range(10)))  # id 0 is padding
SPLITS = ("train", "val", "test")


def evaluate(text: str) -> int:
    """The value of a ListOps expression (a reference for tests and users' own files)."""
    stack: list[list] = [[]]
    for tok in text.split():
        if tok in OPS:
            stack.append([tok])
        elif tok == CLOSE:
            if len(stack) < 2:
                raise ValueError(f"unbalanced ']' in {text!r}")
            op, *args = stack.pop()
            stack[-1].append(OPS[op](args))
        elif tok.isdigit() and len(tok) == 1:
            stack[-1].append(int(tok))
        else:
            raise ValueError(f"unknown ListOps token {tok!r} in {text!r}; valid: {list(VOCAB[1:])}")
    if len(stack) != 1 or len(stack[0]) != 1:
        raise ValueError(f"{text!r} is not one complete ListOps expression")
    return stack[0][0]


def _expression(rng: random.Random, budget: int, depth: int, max_depth: int, max_args: int) -> tuple[list[str], int]:
    """Tokens of an expression at most `budget` tokens long, and its value."""
    if depth >= max_depth or budget < 4:  # the shortest operator with two arguments is 4 tokens
        digit = rng.randrange(10)
        return [str(digit)], digit
    op = rng.choice(list(OPS))
    inner = budget - 2  # minus the operator and ']'
    if depth == max_depth - 1:  # children are digits: use as much of the budget as the arguments allow
        num_args = min(inner, max_args)
    else:
        num_args = rng.randint(2, min(inner, max_args))
    cuts = sorted(rng.sample(range(1, inner), num_args - 1))  # split `inner` into num_args positive parts
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, inner], strict=True)]
    # a part of 2 or 3 tokens could only hold a digit: keep one and give the rest to the largest part
    spare = sum(p - 1 for p in parts if p in (2, 3))
    parts = [1 if p in (2, 3) else p for p in parts]
    largest = max(range(num_args), key=parts.__getitem__)
    if parts[largest] + spare >= 4:
        parts[largest] += spare
    tokens, values = [op], []
    for part in parts:
        sub, value = _expression(rng, part, depth + 1, max_depth, max_args)
        tokens += sub
        values.append(value)
    tokens.append(CLOSE)
    return tokens, OPS[op](values)


def generate(
    num: int, *, seed: int = 0, min_len: int = 4, max_len: int = 100, max_depth: int = 4, max_args: int = 5
) -> list[tuple[str, int]]:
    """`num` (expression, value) pairs; the same arguments always give the same list.

    Args:
        min_len, max_len: expression length range in tokens.
        max_depth: maximum nesting of operators (1 = one operator over digits).
        max_args: maximum arguments of an operator (>= 2).
    """
    if not 4 <= min_len <= max_len:
        raise ValueError(f"ListOps lengths need 4 <= min_len ({min_len}) <= max_len ({max_len})")
    if max_depth < 1 or max_args < 2:
        raise ValueError(f"ListOps needs max_depth ({max_depth}) >= 1 and max_args ({max_args}) >= 2")
    if max_depth == 1 and min_len > max_args + 2:
        raise ValueError(f"with max_depth 1 expressions have at most max_args + 2 = {max_args + 2} tokens < min_len")
    rng = random.Random(seed)
    out: list[tuple[str, int]] = []
    for _ in range(num):
        budget = rng.randint(min_len, max_len)
        for _attempt in range(100):
            tokens, value = _expression(rng, budget, 0, max_depth, max_args)
            if len(tokens) >= min_len:
                break
            budget = min(max_len, budget + min_len - len(tokens))  # a short draw: retry with more room
        else:
            raise ValueError(
                f"ListOps could not reach min_len {min_len} with max_depth {max_depth} and max_args {max_args}; "
                "raise max_depth or max_args"
            )
        out.append((" ".join(tokens), value))
    return out


def generate_splits(sizes: dict[str, int], *, seed: int = 0, **options: int) -> dict[str, list[tuple[str, int]]]:
    """Train/val/test splits; val and test hold no expression that occurs in train (or in each other).

    Args:
        sizes: examples per split, e.g. {"train": 20000, "val": 2000, "test": 2000}.
        options: `generate` options (min_len, max_len, max_depth, max_args).
    """
    unknown = set(sizes) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown ListOps splits {sorted(unknown)}; valid: {list(SPLITS)}")
    splits: dict[str, list[tuple[str, int]]] = {}
    seen: set[str] = set()
    for i, name in enumerate(s for s in SPLITS if s in sizes):
        wanted, kept, rounds = sizes[name], [], 0
        while len(kept) < wanted:
            if rounds == 50:
                raise ValueError(
                    f"ListOps {name}: only {len(kept)} of {wanted} distinct new expressions with {options}; "
                    "the setting has too few distinct expressions (raise max_len, max_depth or max_args)"
                )
            batch = generate(wanted - len(kept), seed=seed * 1000 + 100 * i + rounds, **options)
            rounds += 1
            for text, value in batch:
                if name == "train" or text not in seen:
                    kept.append((text, value))
                    if name != "train":
                        seen.add(text)
        if name == "train":
            seen.update(text for text, _ in kept)
        splits[name] = kept
    return splits
