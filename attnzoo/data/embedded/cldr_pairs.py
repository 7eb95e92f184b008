"""Embedded parallel text: English, German and French phrases from CLDR (the `babel` wheel) and `num2words`.

Why this data: a translation recipe needs parallel text that is real language yet ships with pip (no download),
is small enough to learn in minutes on a CPU, and still exercises what makes translation more than word-for-word
substitution. CLDR, the Unicode locale data that babel bundles, holds professionally translated names of days,
months, countries, languages, currencies and units, with each language's date and list formats and plural
forms; num2words spells numbers in each language. Short phrases and sentences built from them show:

- reordering: "March 3, 1998" -> "3. März 1998"; "On Tuesday I travel to Japan." -> "Am Dienstag reise ich nach
  Japan." (verb second); "I was born on ..." -> "Ich wurde am ... geboren." (participle last);
- compounding: "twenty-one" -> "einundzwanzig", "It costs three thousand four hundred and fifty-seven euros." ->
  "Es kostet dreitausendvierhundertsiebenundfünfzig Euro." (counts up to 9999, so test sentences hold numbers
  never seen in train; measurements of 1000 and more are written in digits, grouped as each language does:
  "5,974 liters" -> "5.974 Liter" -> "5 974 litres");
- agreement: "one hour" -> "eine Stunde", "It takes one day." -> "Die Reise dauert einen Tag." (accusative),
  "vingt et une heures" (feminine), "en France" / "au Japon" / "d'Autriche" (French country prepositions);
- formats: "2:30 PM" -> "14:30"; "France, Germany, and Spain" -> "Frankreich, Deutschland und Spanien".

Facts are true where a sentence states one (the languages spoken in a country are CLDR's official languages).
Non-breaking spaces that CLDR puts in French units and English times are written as plain spaces. Every
phrase renders in all three languages, so any pair (en->de, de->en, en->fr, fr->de, ...) comes from the same
meanings. `generate_pairs` is deterministic for a seed (and the babel/num2words versions); no source or target
sentence occurs in two splits.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable

LANGS = ("en", "de", "fr")

# Countries whose names take no article in English and German (so "in Japan" / "in Japan" hold), with the
# French gender that picks "en"/"au" and "de"/"du": f feminine, m masculine.
COUNTRIES = {
    "FR": "f", "DE": "f", "ES": "f", "IT": "f", "PT": "m", "AT": "f", "BE": "f", "DK": "m", "SE": "f", "NO": "f",
    "FI": "f", "PL": "f", "GR": "f", "IE": "f", "IS": "f", "HU": "f", "CZ": "f", "RO": "f", "BG": "f", "HR": "f",
    "RS": "f", "LU": "m", "RU": "f", "CA": "m", "MX": "m", "BR": "m", "AR": "f", "CL": "m", "PE": "m", "CO": "f",
    "JP": "m", "CN": "f", "IN": "f", "KR": "f", "VN": "m", "TH": "f", "ID": "f", "PK": "m", "SA": "f", "EG": "f",
    "MA": "m", "KE": "m", "NG": "m", "ZA": "f", "GH": "m", "ET": "f", "TN": "f", "AU": "f", "NZ": "f",
}  # fmt: skip
# Languages whose names read well in all three languages (CLDR also lists script variants such as sr_Latn).
LANGUAGES = (
    "fr", "de", "es", "it", "pt", "nl", "da", "sv", "no", "fi", "pl", "el", "en", "ga", "is", "hu", "cs", "ro", "bg",
    "hr", "ru", "lb", "ja", "zh", "hi", "ko", "vi", "th", "id", "ur", "ar", "sw", "am", "qu",
)  # fmt: skip
# Units: CLDR unit id -> (German gender, French gender), for "one": ein/eine/ein(en), un/une.
UNITS = {
    "length-kilometer": ("m", "m"), "length-meter": ("m", "m"), "length-centimeter": ("m", "m"),
    "length-mile": ("f", "m"), "duration-minute": ("f", "f"), "duration-hour": ("f", "f"),
    "duration-day": ("m", "m"), "duration-week": ("f", "f"), "duration-month": ("m", "m"),
    "duration-year": ("n", "m"), "mass-kilogram": ("n", "m"), "mass-gram": ("n", "m"), "volume-liter": ("m", "m"),
}  # fmt: skip
DISTANCES = ("length-kilometer", "length-meter", "length-mile")
DURATIONS = ("duration-minute", "duration-hour", "duration-day", "duration-week", "duration-month", "duration-year")
# Currencies -> the French gender of their name ("vingt et une livres sterling"). Counts start at 2: German
# "ein(en) Japanischen Yen" would need adjective endings that CLDR's names do not carry.
CURRENCIES = {
    "EUR": "m", "USD": "m", "GBP": "f", "JPY": "m", "CHF": "m",
    "CAD": "m", "AUD": "m", "INR": "f", "SEK": "f", "MXN": "m",
}  # fmt: skip
# "about 3 km", "more than 3 km", ...; French "de" elides before "un"/"une".
MODIFIERS = [
    {"en": "", "de": "", "fr": ""},
    {"en": "about ", "de": "etwa ", "fr": "environ "},
    {"en": "more than ", "de": "mehr als ", "fr": "plus de "},
    {"en": "less than ", "de": "weniger als ", "fr": "moins de "},
    {"en": "almost ", "de": "fast ", "fr": "presque "},
]
FIRST_YEAR, LAST_YEAR = 1950, 2049
MAX_MISSES = 2000  # repeated draws in a row after which the templates count as exhausted

Phrase = dict[str, str]


class Cldr:
    """Names and formats from babel, looked up once per language."""

    def __init__(self) -> None:
        try:
            from babel import Locale
            from babel.dates import get_day_names, get_month_names
        except ImportError as err:  # a dependency of attnzoo; missing only in a broken install
            raise ImportError("the embedded translation data needs `babel` (pip install babel)") from err
        self.locales = {lang: Locale.parse(lang) for lang in LANGS}
        self.days = {lang: get_day_names("wide", locale=lang) for lang in LANGS}  # 0 = Monday
        self.months = {lang: get_month_names("wide", locale=lang) for lang in LANGS}  # 1 = January
        self.official = self._official_languages()

    def country(self, code: str, lang: str) -> str:
        return self.locales[lang].territories[code]

    def language(self, code: str, lang: str) -> str:
        return self.locales[lang].languages[code]

    @staticmethod
    def _official_languages() -> dict[str, tuple[str, ...]]:
        from babel.languages import get_official_languages

        spoken = {}
        for code in COUNTRIES:
            langs = tuple(dict.fromkeys(x for x in get_official_languages(code) if x in LANGUAGES))
            if langs:
                spoken[code] = langs
        return spoken


def _plain(text: str) -> str:
    return text.replace("\u202f", " ").replace("\xa0", " ")


def number_words(n: int, lang: str, gender: str = "m", case: str = "nom") -> str:
    """`n` spelled out before a noun of `gender`: German ein/eine/einen, French un/une (also in 21, 81, ...)."""
    from num2words import num2words

    if lang == "de" and n == 1:
        return {"m": "einen" if case == "acc" else "ein", "f": "eine", "n": "ein"}[gender]
    words = num2words(n, lang=lang).replace(",", "")  # English "three thousand, four hundred": no comma
    if lang == "fr" and gender == "f" and (words == "un" or words.endswith((" un", "-un"))):
        words += "e"
    return words


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def _fr_de(prefix: str, rest: str) -> str:
    """French elision of "de" before "un"/"une": "plus de un" -> "plus d'un" (the only vowel-initial numbers here
    that elide; "onze" and "huit" do not)."""
    if prefix.endswith("de ") and rest.startswith("un"):
        return prefix[:-2] + "'" + rest
    return prefix + rest


def _fr_in(code: str, name: str) -> str:
    if COUNTRIES[code] == "f" or name[:1] in "AEIOUÉÈÎ":
        return f"en {name}"
    return f"au {name}"


def _fr_from(code: str, name: str) -> str:
    if name[:1] in "AEIOUÉÈÎ":
        return f"d'{name}"
    return f"de {name}" if COUNTRIES[code] == "f" else f"du {name}"


class Generator:
    """Draws phrases (a meaning rendered in every language of `LANGS`) from named templates."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cldr = Cldr()
        self.countries = sorted(COUNTRIES)
        self.templates: dict[str, tuple[float, Callable[[], Phrase]]] = {
            "full_date": (1.0, self.full_date),
            "long_date": (0.5, self.long_date),
            "quantity": (1.5, self.quantity),
            "money": (0.5, self.money),
            "country_list": (1.0, self.country_list),
            "weekday_time": (0.7, self.weekday_time),
            "born": (0.7, self.born),
            "concert": (0.7, self.concert),
            "travel": (0.7, self.travel),
            "lived": (0.8, self.lived),
            "spoken": (0.3, self.spoken),
            "friend": (0.4, self.friend),
            "walked": (0.6, self.walked),
            "trip": (0.8, self.trip),
            "costs": (0.6, self.costs),
        }

    def draw(self) -> tuple[str, Phrase]:
        names = list(self.templates)
        name = self.rng.choices(names, weights=[self.templates[n][0] for n in names])[0]
        return name, self.templates[name][1]()

    # ---------------------------------------------------------------------------------------------- pieces

    def _count(self, low: int = 1) -> int:
        """A count to spell out: 1-99 more often than 100-9999. Above 100, none ends in 01 (German "hunderteins"
        changes before a noun in ways a rule here would get wrong)."""
        if self.rng.random() < 0.6:
            return self.rng.randint(low, 99)
        while (n := self.rng.randint(100, 9999)) % 100 == 1:
            pass
        return n

    def _date(self) -> dt.date:
        start = dt.date(FIRST_YEAR, 1, 1).toordinal()
        return dt.date.fromordinal(self.rng.randint(start, dt.date(LAST_YEAR, 12, 31).toordinal()))

    def _long_date(self, day: dt.date, lang: str) -> str:
        from babel.dates import format_date

        text = _plain(format_date(day, "long", locale=lang))
        return text.replace("1 ", "1er ", 1) if lang == "fr" and day.day == 1 else text

    def _unit(self, n: int, unit: str, lang: str, case: str = "nom") -> str:
        from babel.units import format_unit

        gender = UNITS[unit][{"en": 0, "de": 0, "fr": 1}[lang]]
        text = _plain(format_unit(n, unit, length="long", locale=lang))  # "5,974 liters", "5.974 Liter", "5 974 litres"
        if n >= 1000:  # digits, grouped as the language does
            return text
        return text.replace(str(n), number_words(n, lang, gender, case), 1)

    def _money(self, n: int, currency: str, lang: str) -> str:
        from babel.numbers import get_currency_name

        gender = CURRENCIES[currency] if lang == "fr" else "m"
        return f"{number_words(n, lang, gender)} {get_currency_name(currency, count=n, locale=lang)}"

    def _time(self, hour: int, minute: int, lang: str) -> str:
        from babel.dates import format_time

        return _plain(format_time(dt.time(hour, minute), "short", locale=lang))

    def _modified(self, mod: Phrase, rendered: Phrase) -> Phrase:
        return {lang: _fr_de(mod[lang], rendered[lang]) if lang == "fr" else mod[lang] + rendered[lang]
                for lang in LANGS}  # fmt: skip

    # ---------------------------------------------------------------------------------------------- templates

    def full_date(self) -> Phrase:
        day = self._date()
        return {lang: f"{self.cldr.days[lang][day.weekday()]}{'' if lang == 'fr' else ','} {self._long_date(day, lang)}"
                for lang in LANGS}  # fmt: skip

    def long_date(self) -> Phrase:
        day = self._date()
        return {lang: self._long_date(day, lang) for lang in LANGS}

    def quantity(self) -> Phrase:
        n, unit = self._count(), self.rng.choice(list(UNITS))
        return self._modified(self.rng.choice(MODIFIERS), {lang: self._unit(n, unit, lang) for lang in LANGS})

    def money(self) -> Phrase:
        n, currency = self._count(low=2), self.rng.choice(sorted(CURRENCIES))
        return {lang: self._money(n, currency, lang) for lang in LANGS}

    def country_list(self) -> Phrase:
        from babel.lists import format_list

        codes = self.rng.sample(self.countries, self.rng.randint(2, 4))
        return {lang: format_list([self.cldr.country(c, lang) for c in codes], locale=lang) for lang in LANGS}

    def weekday_time(self) -> Phrase:
        wd, hour, minute = self.rng.randrange(7), self.rng.randrange(24), 5 * self.rng.randrange(12)
        d, t = self.cldr.days, lambda lang: self._time(hour, minute, lang)
        return {
            "en": f"{d['en'][wd]} at {t('en')}",
            "de": f"{d['de'][wd]} um {t('de')}",
            "fr": f"{d['fr'][wd]} à {t('fr')}",
        }

    def born(self) -> Phrase:
        day = self._date()
        return {
            "en": f"I was born on {self._long_date(day, 'en')}.",
            "de": f"Ich wurde am {self._long_date(day, 'de')} geboren.",
            "fr": f"Je suis né le {self._long_date(day, 'fr')}.",
        }

    def concert(self) -> Phrase:
        day = self._date()
        wd = {lang: self.cldr.days[lang][day.weekday()] for lang in LANGS}
        return {
            "en": f"The concert is on {wd['en']}, {self._long_date(day, 'en')}.",
            "de": f"Das Konzert ist am {wd['de']}, dem {self._long_date(day, 'de')}.",
            "fr": f"Le concert a lieu le {wd['fr']} {self._long_date(day, 'fr')}.",
        }

    def travel(self) -> Phrase:
        wd, code = self.rng.randrange(7), self.rng.choice(self.countries)
        d, c = self.cldr.days, {lang: self.cldr.country(code, lang) for lang in LANGS}
        return {
            "en": f"On {d['en'][wd]} I travel to {c['en']}.",
            "de": f"Am {d['de'][wd]} reise ich nach {c['de']}.",
            "fr": f"{_capitalize(d['fr'][wd])}, je vais {_fr_in(code, c['fr'])}.",
        }

    def lived(self) -> Phrase:
        month, year, code = (
            self.rng.randint(1, 12),
            self.rng.randint(FIRST_YEAR, LAST_YEAR),
            self.rng.choice(self.countries),
        )
        m, c = self.cldr.months, {lang: self.cldr.country(code, lang) for lang in LANGS}
        return {
            "en": f"In {m['en'][month]} {year}, I lived in {c['en']}.",
            "de": f"Im {m['de'][month]} {year} wohnte ich in {c['de']}.",
            "fr": f"En {m['fr'][month]} {year}, j'habitais {_fr_in(code, c['fr'])}.",
        }

    def spoken(self) -> Phrase:
        from babel.lists import format_list

        code = self.rng.choice(sorted(self.cldr.official))
        c = {lang: self.cldr.country(code, lang) for lang in LANGS}
        spoken = {lang: format_list([self.cldr.language(x, lang) for x in self.cldr.official[code]], locale=lang)
                  for lang in LANGS}  # fmt: skip
        return {
            "en": f"In {c['en']}, people speak {spoken['en']}.",
            "de": f"In {c['de']} spricht man {spoken['de']}.",
            "fr": f"{_capitalize(_fr_in(code, c['fr']))}, on parle {spoken['fr']}.",
        }

    def friend(self) -> Phrase:
        code = self.rng.choice(sorted(self.cldr.official))
        spoken = self.rng.choice(self.cldr.official[code])
        c = {lang: self.cldr.country(code, lang) for lang in LANGS}
        s = {lang: self.cldr.language(spoken, lang) for lang in LANGS}
        return {
            "en": f"My friend from {c['en']} speaks {s['en']}.",
            "de": f"Mein Freund aus {c['de']} spricht {s['de']}.",
            "fr": f"Mon ami qui vient {_fr_from(code, c['fr'])} parle {s['fr']}.",
        }

    def walked(self) -> Phrase:
        n, unit = self._count(), self.rng.choice(DISTANCES)
        q = {lang: self._unit(n, unit, lang, case="acc") for lang in LANGS}
        return {
            "en": f"We walked {q['en']}.",
            "de": f"Wir sind {q['de']} gelaufen.",
            "fr": f"Nous avons marché {q['fr']}.",
        }

    def trip(self) -> Phrase:
        n, unit = self._count(), self.rng.choice(DURATIONS)
        mod = self.rng.choice(MODIFIERS[:2] + MODIFIERS[4:])  # "about", "almost": no "more than" in "takes"
        q = self._modified(mod, {lang: self._unit(n, unit, lang, case="acc") for lang in LANGS})
        return {
            "en": f"The trip takes {q['en']}.",
            "de": f"Die Reise dauert {q['de']}.",
            "fr": f"Le voyage dure {q['fr']}.",
        }

    def costs(self) -> Phrase:
        n, currency = self._count(low=2), self.rng.choice(sorted(CURRENCIES))
        q = {lang: self._money(n, currency, lang) for lang in LANGS}
        return {"en": f"It costs {q['en']}.", "de": f"Es kostet {q['de']}.", "fr": f"Cela coûte {q['fr']}."}


def generate_pairs(
    sizes: dict[str, int], *, src_lang: str = "en", tgt_lang: str = "de", seed: int = 0
) -> dict[str, list[tuple[str, str]]]:
    """(source, target) pairs per split, e.g. sizes={"train": 12000, "val": 500, "test": 1000}.

    All pairs are distinct in both source and target, so no test sentence (on either side) occurs in train.

    Raises:
        ValueError: unknown languages, or more pairs asked for than the templates can make distinct.
    """
    for name, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang not in LANGS:
            raise ValueError(f"data.{name}: {lang!r} is not an embedded language; valid: {list(LANGS)}")
    if src_lang == tgt_lang:
        raise ValueError(f"data.src_lang and data.tgt_lang are both {src_lang!r}; pick two of {list(LANGS)}")
    for name, n in sizes.items():
        if n < 1:
            raise ValueError(f"data.num_{name} ({n}) must be >= 1")
    gen = Generator(random.Random(seed))
    total = sum(sizes.values())
    pairs: list[tuple[str, str]] = []
    seen_src: set[str] = set()
    seen_tgt: set[str] = set()
    misses = 0  # draws in a row that repeated a sentence
    while len(pairs) < total:
        _, phrase = gen.draw()
        src, tgt = phrase[src_lang], phrase[tgt_lang]
        if src in seen_src or tgt in seen_tgt:
            misses += 1
            if misses > MAX_MISSES:
                raise ValueError(
                    f"the embedded data made only {len(pairs)} distinct pairs of the {total} asked for; ask fewer"
                )
            continue
        misses = 0
        seen_src.add(src)
        seen_tgt.add(tgt)
        pairs.append((src, tgt))
    gen.rng.shuffle(pairs)
    out, start = {}, 0
    for name, n in sizes.items():
        out[name] = pairs[start : start + n]
        start += n
    return out
