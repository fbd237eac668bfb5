"""{{convert}}: a quantity and its conversion, as English Wikipedia's Module:Convert shows them.

    convert(["10", "km", "mi"], {})               -> "10 kilometres (6.2 mi)"
    convert(["5", "ft", "m"], {"abbr": "on"})     -> "5 ft (1.5 m)"
    convert(["10", "to", "20", "km"], {})         -> "10 to 20 kilometres (6.2 to 12.4 mi)"
    convert(["20", "C"], {})                      -> "20 °C (68 °F)"

Pure; None for anything it does not know (a unit outside UNITS, a value it cannot read, a display it does not
draw), so that the caller drops the template as before. What is drawn, from Module:Convert's documentation:
the input with the unit's name and the output with its symbol (abbr=on: symbols; off: names; in: the reverse);
disp=or / flip / out / number / b, order=flip; adj=on ("10-kilometre"); sp=us (US spellings); ranges with to,
and, or, by, x, -, –, +/-; several output units ("m ft" -> "(33 ft; 18 fathoms)" style); a precision given
after the units, or sigfig=N. Without either, the output is rounded as the module rounds it (`_precision`): to
about the input's precision, adjusted by the ratio of input to output, but never to fewer than two significant
figures; temperatures keep three significant figures of their value in kelvins.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    kind: str            # units convert only within a kind
    scale: float         # SI value of one unit (temperatures: of one degree)
    symbol: str
    name: str            # singular, British spelling; the plural adds "s" unless `plural` says otherwise
    plural: str = ""
    default: str = ""    # output unit(s) when the template names none
    offset: float = 0.0  # temperatures: SI (kelvin) value of the unit's zero

    def label(self, value_is_one: bool, spell_out: bool, us: bool) -> str:
        if not spell_out:
            return self.symbol
        name = self.name if value_is_one else (self.plural or self.name + "s")
        return _american(name) if us else name


def _american(name: str) -> str:
    return name.replace("metre", "meter").replace("litre", "liter").replace("tonne", "metric ton")


_FT, _IN, _MI, _LB = 0.3048, 0.0254, 1609.344, 0.45359237
_USGAL, _BBL = 3.785411784e-3, 0.158987294928
UNITS: dict[str, Unit] = {
    # length
    "km": Unit("length", 1e3, "km", "kilometre", default="mi"),
    "m": Unit("length", 1.0, "m", "metre", default="ft"),
    "cm": Unit("length", 1e-2, "cm", "centimetre", default="in"),
    "mm": Unit("length", 1e-3, "mm", "millimetre", default="in"),
    "Gm": Unit("length", 1e9, "Gm", "gigametre", default="mi"),
    "mi": Unit("length", _MI, "mi", "mile", default="km"),
    "ft": Unit("length", _FT, "ft", "foot", "feet", default="m"),
    "in": Unit("length", _IN, "in", "inch", "inches", default="mm"),
    "yd": Unit("length", 0.9144, "yd", "yard", default="m"),
    "nmi": Unit("length", 1852.0, "nmi", "nautical mile", default="km mi"),
    "smi": Unit("length", _MI, "mi", "statute mile", default="km"),
    "fathom": Unit("length", 1.8288, "fathoms", "fathom", default="m ft"),
    "AU": Unit("length", 1.495978707e11, "AU", "astronomical unit", default="km mi"),
    "ly": Unit("length", 9.4607304725808e15, "ly", "light-year", default="km"),
    # area
    "km2": Unit("area", 1e6, "km²", "square kilometre", default="sqmi"),
    "m2": Unit("area", 1.0, "m²", "square metre", default="sqft"),
    "ha": Unit("area", 1e4, "ha", "hectare", default="acre"),
    "sqmi": Unit("area", _MI ** 2, "sq mi", "square mile", default="km2"),
    "sqft": Unit("area", _FT ** 2, "sq ft", "square foot", "square feet", default="m2"),
    "acre": Unit("area", 4046.8564224, "acres", "acre", default="ha"),
    # volume
    "m3": Unit("volume", 1.0, "m³", "cubic metre", default="cuft"),
    "km3": Unit("volume", 1e9, "km³", "cubic kilometre", default="cumi"),
    "L": Unit("volume", 1e-3, "L", "litre", default="impgal USgal"),
    "Ml": Unit("volume", 1e3, "Ml", "megalitre", default="USgal"),
    "cuft": Unit("volume", _FT ** 3, "cu ft", "cubic foot", "cubic feet", default="m3"),
    "ft3": Unit("volume", _FT ** 3, "cu ft", "cubic foot", "cubic feet", default="m3"),
    "cumi": Unit("volume", _MI ** 3, "cu mi", "cubic mile", default="km3"),
    "USgal": Unit("volume", _USGAL, "US gal", "US gallon", default="L impgal"),
    "impgal": Unit("volume", 4.54609e-3, "imp gal", "imperial gallon", default="L USgal"),
    "oilbbl": Unit("volume", _BBL, "bbl", "barrel", default="m3"),
    # flow
    "m3/d": Unit("flow", 1.0 / 86400, "m³/d", "cubic metre per day", "cubic metres per day", default="oilbbl/d"),
    "oilbbl/d": Unit("flow", _BBL / 86400, "bbl/d", "barrel per day", "barrels per day", default="m3/d"),
    # mass
    "kg": Unit("mass", 1.0, "kg", "kilogram", default="lb"),
    "g": Unit("mass", 1e-3, "g", "gram", default="oz"),
    "t": Unit("mass", 1e3, "t", "tonne", default="LT ST"),
    "MT": Unit("mass", 1e3, "MT", "metric ton", default="LT ST"),
    "lb": Unit("mass", _LB, "lb", "pound", default="kg"),
    "oz": Unit("mass", _LB / 16, "oz", "ounce", default="g"),
    "LT": Unit("mass", 1016.0469088, "long tons", "long ton", default="t"),
    "ST": Unit("mass", 907.18474, "short tons", "short ton", default="t"),
    "carat": Unit("mass", 2e-4, "carats", "carat", default="g"),
    # speed
    "km/h": Unit("speed", 1 / 3.6, "km/h", "kilometre per hour", "kilometres per hour", default="mph"),
    "mph": Unit("speed", _MI / 3600, "mph", "mile per hour", "miles per hour", default="km/h"),
    "m/s": Unit("speed", 1.0, "m/s", "metre per second", "metres per second", default="ft/s"),
    "ft/s": Unit("speed", _FT, "ft/s", "foot per second", "feet per second", default="m/s"),
    "kn": Unit("speed", 1852 / 3600, "kn", "knot", default="km/h mph"),
    # temperature and its differences
    "C": Unit("temperature", 1.0, "°C", "degree Celsius", "degrees Celsius", default="F", offset=273.15),
    "F": Unit("temperature", 5 / 9, "°F", "degree Fahrenheit", "degrees Fahrenheit", default="C",
              offset=273.15 - 32 * 5 / 9),
    "K": Unit("temperature", 1.0, "K", "kelvin", default="C F"),
    "C-change": Unit("temperature change", 1.0, "°C", "degree Celsius", "degrees Celsius", default="F-change"),
    "F-change": Unit("temperature change", 5 / 9, "°F", "degree Fahrenheit", "degrees Fahrenheit",
                     default="C-change"),
    # population density
    "PD/sqmi": Unit("density", 1 / _MI ** 2, "/sq mi", "inhabitant per square mile",
                    "inhabitants per square mile", default="PD/km2"),
    "PD/km2": Unit("density", 1e-6, "/km²", "inhabitant per square kilometre",
                   "inhabitants per square kilometre", default="PD/sqmi"),
}
_ALIASES = {"°C": "C", "°F": "F", "sqkm": "km2", "ha2": "ha", "acres": "acre", "l": "L", "feet": "ft",
            "foot": "ft", "mile": "mi", "miles": "mi", "kmh": "km/h", "kph": "km/h", "tonne": "t", "usgal": "USgal",
            "cuft": "cuft", "e3m3/d": "e3m3/d"}
# e3acre, e6ha, Moilbbl, koilbbl/d: a multiple of a unit, shown "million acres", "thousand bbl/d"
_MULTIPLES = {"e3": (1e3, "thousand"), "k": (1e3, "thousand"), "e6": (1e6, "million"), "M": (1e6, "million"),
              "e9": (1e9, "billion"), "G": (1e9, "billion"), "e12": (1e12, "trillion"), "T": (1e12, "trillion")}

# Words between two values of a range, and how each shows (with names, with symbols).
_RANGES = {"to": (" to ", " to "), "-": ("–", "–"), "–": ("–", "–"), "and": (" and ", " and "),
           "or": (" or ", " or "), "by": (" by ", " by "), "x": (" by ", " × "), "×": (" by ", " × "),
           "+/-": (" ± ", " ± "), "±": (" ± ", " ± "), "and(-)": (" and ", "–"), "to(-)": (" to ", "–")}
_NUMBER = re.compile(r"[-−+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?", re.I)
_MINUS = "−"


def unit(code: str) -> Unit | None:
    """The unit a {{convert}} code names, multiples included; None if unknown."""
    code = _ALIASES.get(code, code)
    if code in UNITS:
        return UNITS[code]
    for prefix, (factor, word) in _MULTIPLES.items():
        base = UNITS.get(code[len(prefix):]) if code.startswith(prefix) else None
        if base is not None and not base.kind.startswith("temperature"):
            many = f"{word} {base.plural or base.name + 's'}"
            return Unit(base.kind, base.scale * factor, f"{word} {base.symbol}", many, many, default=base.default)
    return None


@dataclass(frozen=True)
class _Input:
    values: list[tuple[float, str]]   # each value and its text as typed
    separators: list[str]             # range words between them
    unit: Unit
    outputs: list[Unit]
    precision: int | None             # a fixed number of decimals (negative: tens, hundreds ...)


def convert(pos: list[str], named: dict[str, str]) -> str | None:
    """The text {{convert|pos...|named...}} shows, or None (see the module doc)."""
    parsed = _parse(pos)
    if parsed is None:
        return None
    disp = named.get("disp", "b").strip()
    if named.get("order", "").strip() == "flip":
        disp = "flip"
    abbr = named.get("abbr", "").strip()
    us = named.get("sp", "").strip() == "us"
    adj = named.get("adj", "").strip() in ("on", "yes", "y")
    sigfig = named.get("sigfig", "").strip()
    if disp not in ("b", "br", "or", "flip", "out", "output only", "number", "output number only", "s"):
        return None
    converted = [_converted(parsed, out, sigfig) for out in parsed.outputs]
    if None in converted:
        return None
    given = [text for _, text in parsed.values]
    in_names, out_names = abbr in ("off", "out", ""), abbr in ("off", "in")
    if parsed.unit.kind.startswith("temperature") and abbr == "":
        in_names = False                   # temperatures show symbols unless abbr=off
    if disp in ("out", "output only", "number", "output number only"):
        return _quantity(converted[0], parsed.separators, parsed.outputs[0], disp.startswith("number") or
                         disp == "output number only", out_names, us, adj)
    first = _quantity(given, parsed.separators, parsed.unit, False, in_names, us, adj)
    rest = [_quantity(c, parsed.separators, out, False, out_names, us, False)
            for c, out in zip(converted, parsed.outputs)]
    if disp == "flip":
        first, rest = _quantity(converted[0], parsed.separators, parsed.outputs[0], False, in_names, us, adj), \
            [_quantity(given, parsed.separators, parsed.unit, False, out_names, us, False)]
    if disp == "or":
        return f"{first} or {' or '.join(rest)}"
    return f"{first} ({'; '.join(rest)})"


def _parse(pos: list[str]) -> _Input | None:
    """[value, (range word, value)..., unit, (output units | precision)...] -> _Input, or None."""
    args = [a.strip() for a in pos]
    values, separators, i = [], [], 0
    while True:
        value = _read_number(args[i]) if i < len(args) else None
        if value is None:
            return None
        values.append((value, args[i]))
        if i + 2 < len(args) and args[i + 1] in _RANGES:
            separators.append(args[i + 1])
            i += 2
            continue
        break
    rest = args[i + 1:]
    if not rest or (source := unit(rest[0])) is None:
        return None
    precision, outputs = None, []
    for arg in rest[1:3]:
        if re.fullmatch(r"-?\d+", arg):
            precision = int(arg)
            break
        if arg:
            outputs = [unit(code) for code in arg.split()]
    if not outputs:
        outputs = [unit(code) for code in source.default.split()]
    if not outputs or any(out is None or out.kind != source.kind for out in outputs):
        return None
    return _Input(values, separators, source, outputs, precision)


def _read_number(text: str) -> float | None:
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return float(text.replace(",", "").replace(_MINUS, "-"))
    except ValueError:
        return None


def _converted(parsed: _Input, out: Unit, sigfig: str) -> list[str] | None:
    """The input values converted to `out`, rounded alike (a range shows one precision), as text."""
    source, results = parsed.unit, []
    for value, _ in parsed.values:
        si = value * source.scale + source.offset if source.kind == "temperature" else value * source.scale
        result = (si - out.offset) / out.scale if out.kind == "temperature" else si / out.scale
        if not math.isfinite(result):
            return None
        results.append(result)
    if sigfig.isdigit() and int(sigfig) > 0:   # significant figures of each value
        return [_format(r, int(sigfig) - 1 - math.floor(math.log10(abs(r))) if r else 0) for r in results]
    if parsed.precision is not None:
        return [_format(r, parsed.precision) for r in results]
    decimals = max(_precision(v, typed, r, source, out) for (v, typed), r in zip(parsed.values, results))
    return [_format(r, decimals) for r in results]


def _precision(value: float, typed: str, result: float, source: Unit, out: Unit) -> int:
    """Module:Convert's default precision: decimals to show of `result` (negative: round to tens ...)."""
    fudge = 1e-14
    digits = typed.replace(",", "").lstrip("-−+").lower()
    mantissa, _, exponent = digits.partition("e")
    integer, dot, decimals = mantissa.partition(".")
    precision = len(decimals) if dot else -(len(integer) - len(integer.rstrip("0")))
    if exponent:
        precision -= int(exponent)
    if source.kind == "temperature" and out.kind == "temperature":
        kelvin = abs(value * source.scale + source.offset)
        minimum = 2 if kelvin < 1e-8 else 2 - math.floor(math.log10(kelvin) + fudge)
        adjust = 0.0
    else:
        if value == 0 or result == 0:
            return 0
        adjust = math.log10(abs(value / result)) + 0.5
        minimum = 1 - math.floor(math.log10(abs(result)) + fudge)
    return max(precision + math.floor(adjust + fudge), minimum)


def _format(value: float, decimals: int) -> str:
    """A converted value rounded to `decimals` (negative: to tens, hundreds ...), as typed text (no commas)."""
    if decimals < 0:
        value = round(value, decimals)
    text = f"{abs(value):.{max(decimals, 0)}f}"
    return ("-" + text) if value < 0 and text.strip("0.") else text


def _quantity(values: list[str], separators: list[str], of: Unit, bare: bool, names: bool, us: bool,
              adj: bool) -> str:
    """ "10 to 20 kilometres", "6.2–12.4 mi", "10-kilometre", or the bare numbers."""
    shown = _display(values[0])
    for separator, value in zip(separators, values[1:]):
        shown += _RANGES[separator][0 if names else 1] + _display(value)
    if bare:
        return shown
    label = of.label(adj or _read_number(values[-1]) == 1 and "." not in values[-1], names, us)
    return f"{shown}-{label}" if adj and names else f"{shown} {label}"


def _display(typed: str) -> str:
    """A value as shown: thousands separated by commas, a true minus sign (typed or converted alike)."""
    sign, digits = (_MINUS, typed[1:]) if typed[:1] in ("-", _MINUS) else ("", typed.lstrip("+"))
    integer, dot, rest = digits.partition(".")
    if "," not in integer and integer.isdigit() and len(integer) > 3 and "e" not in rest.lower():
        integer = f"{int(integer):,}"
    return sign + integer + dot + rest
