"""Tasks for the real-model datasets (``demo/build_real.py``): prompts, references, splits and labels.

The facts below (capital, currency, official language and continent of 193 countries) were **written by hand for
this project** from general knowledge, as they stand in 2026; nothing was downloaded. Where a country has several
capitals or official languages, or common spellings differ, every accepted form is listed (``Kyiv/Kiev``). Facts that
changed recently are the current ones (Croatia and Bulgaria use the euro; Burundi's capital is Gitega; Kazakhstan's is
Astana). A few facts are left out (``-``) because no answer could be checked fairly: a capital that shares the
country's name (Singapore, Monaco, ...: any answer that repeats the question would contain it), Nauru's capital (it has
none officially), Zimbabwe's currency (changed several times since 2009), and the continent of Australia and of South
Africa (the country's own name contains the continent's).

Families (prompts go through the model's chat template as one user message, no system message of our own):

``short_facts``
    "What is the capital of X? Answer in a few words." (also currency, official language, continent). Labeled by
    ``label_from_reference(answer, reference, matcher="contains")``: correct when one accepted form occurs in the
    answer as whole words after ``normalize_answer``. References are ``||``-separated.
``arithmetic``
    "What is 47 + 38?" (+, -, ×), small numbers (2-12) three times in five, a two-digit and a one-digit number once,
    two two-digit numbers once (:data:`DEFAULT_ARITHMETIC_SIZES`: two-digit numbers alone were too hard for
    SmolLM2-135M); the ``numeric`` matcher on the answer's last number.
``word_problems``
    Two-step word problems with small numbers ("Omar has 7 shells. He finds 3 more, then gives 2 away. How many
    shells does he have now? Work it out step by step, then write 'Answer:' and the number."; the story kinds of
    :data:`WORD_KINDS`), answered with the model's own reasoning; ``numeric`` on the last number. Numbers are small
    (``a`` in 3 to 12, ``b`` in 2 to 6, ``c`` in 1 to 4) and the prompt asks for the steps: with two-digit numbers
    and no such request SmolLM2-135M got none right in the pilot.
``country_facts``
    "Write a short paragraph about X. Say what its capital is and what its official language is.", for the
    countries of tiers 1 and 2 (the model named both facts of a tier-3 country right too rarely). The answer is a
    paragraph (median about 85 tokens) with other claims around the two facts. Labeled per fact by
    :func:`judge_facts` (see there); 1 only when both facts are stated and right. Three facts (capital, currency,
    language, in three sentences) were tried first: the model stated all three right in 1 answer of 75; "Answer in
    two sentences" gave answers of 20 tokens, not a long answer.

Splits: a problem is in ``validation`` or ``test`` by a SHA-256 hash of its subject (the country; or the operation and
its numbers), so no country or number pair is in both (:func:`split_of`). A country's short facts and its long answer
are in the same split.

Currency references need the currency's full name ("Australian dollar"), or its unit alone ("yen") only when no other
country in the table uses a unit of that name: "the dollar" for Australia, or "the peso" for Mexico, is not enough
(the answer does not say which), so it is labeled wrong. The United States' "dollar" and the United Kingdom's "pound"
are accepted alone. Accented names are also accepted without their accents ("Bogota" for "Bogotá"), and a continent
as "the <adjective> continent" ("the South American continent").

``contains`` is lenient where an answer names several candidates: "nestled between Africa and Europe" is right for
Morocco, "French, with English being the primary language" for Grenada. It is the library's matcher, used as is.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .tasks import draw_distinct

__all__ = ["ARITHMETIC_SIZES", "COUNTRIES", "DEFAULT_ARITHMETIC_SIZES", "FAMILIES", "FactVerdict", "JUDGED_RELATIONS",
           "LONG_RELATIONS", "LONG_TIERS",
           "Problem", "RELATIONS", "arithmetic_problems", "countries", "country_fact_problems", "fact_detail",
           "first_wrong_token_of", "judge_facts", "label_of", "labeled", "locate_first_wrong", "reference_of",
           "sentence_spans",
           "short_fact_problems", "split_of", "WORD_KINDS", "word_problems"]

FAMILIES = ("short_facts", "arithmetic", "word_problems", "country_facts")
RELATIONS = ("capital", "currency", "language", "continent")
LONG_RELATIONS = ("capital", "language")  # the facts of a country_facts answer, in asked order
JUDGED_RELATIONS = ("capital", "currency", "language")  # the facts judge_facts can find in an answer (by keyword)
LONG_TIERS = (1, 2)  # the country tiers of country_facts

# name | capital | currency | official language(s) | continent | tier
# "/" separates accepted forms; "-" leaves the fact out. Continent codes: AF Africa, AS Asia, EU Europe, NA North
# America, CA Central America (North America), CB Caribbean (North America), SA South America, OC Oceania; "EU+AS"
# accepts both. Tier: 1 prominent, 2 middling, 3 small or rarely in the news (our judgement; used to set difficulty).
_TABLE = """
Afghanistan | Kabul | Afghan afghani/afghani | Pashto/Dari | AS | 2
Albania | Tirana/Tirane | Albanian lek/lek | Albanian | EU | 2
Algeria | Algiers | Algerian dinar | Arabic/Berber/Tamazight | AF | 2
Andorra | Andorra la Vella | euro | Catalan | EU | 3
Angola | Luanda | Angolan kwanza/kwanza | Portuguese | AF | 2
Antigua and Barbuda | St. John's/Saint John's | East Caribbean dollar | English | CB | 3
Argentina | Buenos Aires | Argentine peso/Argentinian peso | Spanish | SA | 1
Armenia | Yerevan | Armenian dram/dram | Armenian | EU+AS | 2
Australia | Canberra | Australian dollar | English | - | 1
Austria | Vienna | euro | German | EU | 1
Azerbaijan | Baku | Azerbaijani manat | Azerbaijani/Azeri | EU+AS | 2
the Bahamas | Nassau | Bahamian dollar | English | CB | 3
Bahrain | Manama | Bahraini dinar | Arabic | AS | 3
Bangladesh | Dhaka | Bangladeshi taka/taka | Bengali/Bangla | AS | 2
Barbados | Bridgetown | Barbadian dollar/Barbados dollar | English | CB | 3
Belarus | Minsk | Belarusian ruble/Belarusian rouble | Belarusian/Russian | EU | 2
Belgium | Brussels | euro | Dutch/French/German/Flemish | EU | 1
Belize | Belmopan | Belize dollar/Belizean dollar | English | CA | 3
Benin | Porto-Novo | West African CFA franc/CFA franc | French | AF | 3
Bhutan | Thimphu | Bhutanese ngultrum/ngultrum | Dzongkha | AS | 3
Bolivia | Sucre/La Paz | Bolivian boliviano/boliviano | Spanish/Quechua/Aymara/Guarani | SA | 2
Bosnia and Herzegovina | Sarajevo | convertible mark/Bosnia and Herzegovina convertible mark | Bosnian/Croatian/Serbian | EU | 2
Botswana | Gaborone | Botswana pula/pula | English/Setswana/Tswana | AF | 3
Brazil | Brasília | Brazilian real | Portuguese | SA | 1
Brunei | Bandar Seri Begawan | Brunei dollar/Bruneian dollar | Malay | AS | 3
Bulgaria | Sofia | euro | Bulgarian | EU | 2
Burkina Faso | Ouagadougou | West African CFA franc/CFA franc | French/Mooré/Moore/Dyula/Dioula/Fula | AF | 3
Burundi | Gitega | Burundian franc | Kirundi/Rundi/French/English | AF | 3
Cambodia | Phnom Penh | Cambodian riel/riel | Khmer | AS | 2
Cameroon | Yaoundé | Central African CFA franc/CFA franc | French/English | AF | 2
Canada | Ottawa | Canadian dollar | English/French | NA | 1
Cape Verde | Praia | Cape Verdean escudo/escudo | Portuguese | AF | 3
the Central African Republic | Bangui | Central African CFA franc/CFA franc | French/Sango | AF | 3
Chad | N'Djamena/Ndjamena | Central African CFA franc/CFA franc | French/Arabic | AF | 3
Chile | Santiago | Chilean peso | Spanish | SA | 1
China | Beijing/Peking | renminbi/Chinese yuan/yuan | Mandarin/Chinese/Standard Chinese/Putonghua | AS | 1
Colombia | Bogotá | Colombian peso | Spanish | SA | 1
the Comoros | Moroni | Comorian franc | Comorian/Arabic/French | AF | 3
the Republic of the Congo | Brazzaville | Central African CFA franc/CFA franc | French | AF | 3
the Democratic Republic of the Congo | Kinshasa | Congolese franc | French | AF | 2
Costa Rica | San José | Costa Rican colón/colón | Spanish | CA | 2
Croatia | Zagreb | euro | Croatian | EU | 2
Cuba | Havana | Cuban peso | Spanish | CB | 1
Cyprus | Nicosia | euro | Greek/Turkish | EU+AS | 2
Czechia | Prague | Czech koruna/Czech crown/koruna | Czech | EU | 2
Denmark | Copenhagen | Danish krone | Danish | EU | 1
Djibouti | - | Djiboutian franc | French/Arabic | AF | 3
Dominica | Roseau | East Caribbean dollar | English | CB | 3
the Dominican Republic | Santo Domingo | Dominican peso | Spanish | CB | 2
Ecuador | Quito | United States dollar/US dollar/American dollar | Spanish | SA | 2
Egypt | Cairo | Egyptian pound | Arabic | AF | 1
El Salvador | San Salvador | United States dollar/US dollar/American dollar/bitcoin | Spanish | CA | 2
Equatorial Guinea | Malabo/Ciudad de la Paz | Central African CFA franc/CFA franc | Spanish/French/Portuguese | AF | 3
Eritrea | Asmara | Eritrean nakfa/nakfa | Tigrinya/Arabic/English | AF | 3
Estonia | Tallinn | euro | Estonian | EU | 2
Eswatini | Mbabane/Lobamba | Swazi lilangeni/lilangeni/emalangeni/South African rand | Swazi/siSwati/Swati/English | AF | 3
Ethiopia | Addis Ababa | Ethiopian birr/birr | Amharic/Oromo/Afaan Oromo/Somali/Tigrinya/Afar | AF | 2
Fiji | Suva | Fijian dollar/Fiji dollar | English/Fijian/Hindi/Fiji Hindi | OC | 3
Finland | Helsinki | euro | Finnish/Swedish | EU | 1
France | Paris | euro | French | EU | 1
Gabon | Libreville | Central African CFA franc/CFA franc | French | AF | 3
the Gambia | Banjul | Gambian dalasi/dalasi | English | AF | 3
Georgia | Tbilisi | Georgian lari/lari | Georgian | EU+AS | 2
Germany | Berlin | euro | German | EU | 1
Ghana | Accra | Ghanaian cedi/cedi | English | AF | 2
Greece | Athens | euro | Greek | EU | 1
Grenada | St. George's/Saint George's | East Caribbean dollar | English | CB | 3
Guatemala | Guatemala City | Guatemalan quetzal/quetzal | Spanish | CA | 2
Guinea | Conakry | Guinean franc | French | AF | 3
Guinea-Bissau | Bissau | West African CFA franc/CFA franc | Portuguese | AF | 3
Guyana | Georgetown | Guyanese dollar | English | SA | 3
Haiti | Port-au-Prince | Haitian gourde/gourde | French/Haitian Creole/Creole | CB | 2
Honduras | Tegucigalpa | Honduran lempira/lempira | Spanish | CA | 2
Hungary | Budapest | Hungarian forint/forint | Hungarian/Magyar | EU | 2
Iceland | Reykjavík | Icelandic króna/Icelandic krona | Icelandic | EU | 2
India | New Delhi | Indian rupee | Hindi/English | AS | 1
Indonesia | Jakarta/Nusantara | Indonesian rupiah/rupiah | Indonesian/Bahasa Indonesia | AS | 1
Iran | Tehran | Iranian rial | Persian/Farsi | AS | 1
Iraq | Baghdad | Iraqi dinar | Arabic/Kurdish | AS | 1
Ireland | Dublin | euro | Irish/English/Gaelic | EU | 1
Italy | Rome | euro | Italian | EU | 1
Ivory Coast | Yamoussoukro | West African CFA franc/CFA franc | French | AF | 3
Jamaica | Kingston | Jamaican dollar | English | CB | 2
Japan | Tokyo | Japanese yen/yen | Japanese | AS | 1
Jordan | Amman | Jordanian dinar | Arabic | AS | 2
Kazakhstan | Astana/Nur-Sultan | Kazakhstani tenge/tenge | Kazakh/Russian | AS | 2
Kenya | Nairobi | Kenyan shilling | English/Swahili/Kiswahili | AF | 1
Kiribati | Tarawa/South Tarawa | Australian dollar/Kiribati dollar | English/Gilbertese | OC | 3
Kuwait | Kuwait City | Kuwaiti dinar | Arabic | AS | 2
Kyrgyzstan | Bishkek | Kyrgyz som/Kyrgyzstani som | Kyrgyz/Kirghiz/Russian | AS | 3
Laos | Vientiane | Lao kip/Laotian kip/kip | Lao/Laotian | AS | 3
Latvia | Riga | euro | Latvian | EU | 2
Lebanon | Beirut | Lebanese pound/Lebanese lira | Arabic | AS | 2
Lesotho | Maseru | Lesotho loti/loti/maloti/South African rand | Sesotho/Sotho/English | AF | 3
Liberia | Monrovia | Liberian dollar | English | AF | 3
Libya | Tripoli | Libyan dinar | Arabic | AF | 2
Liechtenstein | Vaduz | Swiss franc | German | EU | 3
Lithuania | Vilnius | euro | Lithuanian | EU | 2
Luxembourg | - | euro | Luxembourgish/French/German | EU | 2
Madagascar | Antananarivo | Malagasy ariary/ariary | Malagasy/French | AF | 3
Malawi | Lilongwe | Malawian kwacha | English/Chichewa | AF | 3
Malaysia | Kuala Lumpur/Putrajaya | Malaysian ringgit/ringgit | Malay/Malaysian/Bahasa Malaysia | AS | 2
the Maldives | Malé | Maldivian rufiyaa/rufiyaa | Dhivehi/Divehi/Maldivian | AS | 3
Mali | Bamako | West African CFA franc/CFA franc | French/Bambara | AF | 3
Malta | Valletta | euro | Maltese/English | EU | 2
the Marshall Islands | Majuro | United States dollar/US dollar/American dollar | Marshallese/English | OC | 3
Mauritania | Nouakchott | Mauritanian ouguiya/ouguiya | Arabic | AF | 3
Mauritius | Port Louis | Mauritian rupee | English/French | AF | 3
Mexico | Mexico City | Mexican peso | Spanish | NA | 1
Micronesia | Palikir | United States dollar/US dollar/American dollar | English | OC | 3
Moldova | Chișinău/Chisinau/Kishinev | Moldovan leu | Romanian/Moldovan | EU | 3
Monaco | - | euro | French | EU | 3
Mongolia | Ulaanbaatar/Ulan Bator | Mongolian tögrög/tugrik/tögrög/togrog/tughrik | Mongolian | AS | 2
Montenegro | Podgorica | euro | Montenegrin | EU | 3
Morocco | Rabat | Moroccan dirham | Arabic/Berber/Tamazight | AF | 2
Mozambique | Maputo | Mozambican metical/metical | Portuguese | AF | 3
Myanmar | Naypyidaw/Nay Pyi Taw/Naypyitaw | Myanmar kyat/Burmese kyat/kyat | Burmese | AS | 2
Namibia | Windhoek | Namibian dollar/South African rand | English | AF | 3
Nauru | - | Australian dollar | Nauruan/English | OC | 3
Nepal | Kathmandu | Nepalese rupee/Nepali rupee | Nepali/Nepalese | AS | 2
the Netherlands | Amsterdam | euro | Dutch | EU | 1
New Zealand | Wellington | New Zealand dollar | English/Maori/Māori | OC | 1
Nicaragua | Managua | Nicaraguan córdoba/córdoba | Spanish | CA | 2
Niger | Niamey | West African CFA franc/CFA franc | French/Hausa | AF | 3
Nigeria | Abuja | Nigerian naira/naira | English | AF | 1
North Korea | Pyongyang | North Korean won | Korean | AS | 2
North Macedonia | Skopje | Macedonian denar/denar | Macedonian/Albanian | EU | 3
Norway | Oslo | Norwegian krone | Norwegian/Sami | EU | 1
Oman | Muscat | Omani rial | Arabic | AS | 2
Pakistan | Islamabad | Pakistani rupee | Urdu/English | AS | 1
Palau | Ngerulmud | United States dollar/US dollar/American dollar | Palauan/English | OC | 3
Panama | Panama City | Panamanian balboa/balboa/United States dollar/US dollar | Spanish | CA | 2
Papua New Guinea | Port Moresby | Papua New Guinean kina/kina | English/Tok Pisin/Hiri Motu | OC | 3
Paraguay | Asunción | Paraguayan guaraní/guaraní | Spanish/Guaraní | SA | 2
Peru | Lima | Peruvian sol/sol/nuevo sol | Spanish/Quechua/Aymara | SA | 1
the Philippines | Manila | Philippine peso/Filipino peso | Filipino/English/Tagalog | AS | 1
Poland | Warsaw | Polish złoty/Polish zloty/złoty/zloty | Polish | EU | 1
Portugal | Lisbon | euro | Portuguese | EU | 1
Qatar | Doha | Qatari riyal | Arabic | AS | 2
Romania | Bucharest | Romanian leu | Romanian | EU | 2
Russia | Moscow | Russian ruble/Russian rouble | Russian | EU+AS | 1
Rwanda | Kigali | Rwandan franc | Kinyarwanda/French/English/Swahili | AF | 3
Saint Kitts and Nevis | Basseterre | East Caribbean dollar | English | CB | 3
Saint Lucia | Castries | East Caribbean dollar | English | CB | 3
Saint Vincent and the Grenadines | Kingstown | East Caribbean dollar | English | CB | 3
Samoa | Apia | Samoan tālā/Samoan tala/tālā/tala | Samoan/English | OC | 3
San Marino | - | euro | Italian | EU | 3
São Tomé and Príncipe | - | São Tomé and Príncipe dobra/dobra | Portuguese | AF | 3
Saudi Arabia | Riyadh | Saudi riyal | Arabic | AS | 1
Senegal | Dakar | West African CFA franc/CFA franc | French | AF | 2
Serbia | Belgrade | Serbian dinar | Serbian | EU | 2
Seychelles | Victoria | Seychellois rupee/Seychelles rupee | Seychellois Creole/Creole/English/French | AF | 3
Sierra Leone | Freetown | Sierra Leonean leone | English | AF | 3
Singapore | - | Singapore dollar | English/Malay/Mandarin/Tamil | AS | 2
Slovakia | Bratislava | euro | Slovak | EU | 2
Slovenia | Ljubljana | euro | Slovene/Slovenian | EU | 2
the Solomon Islands | Honiara | Solomon Islands dollar | English | OC | 3
Somalia | Mogadishu | Somali shilling | Somali/Arabic | AF | 2
South Africa | Pretoria/Cape Town/Bloemfontein | South African rand/rand | English/Zulu/Xhosa/Afrikaans/Sotho/Tswana/Tsonga/Swati/Venda/Ndebele/Pedi/Sepedi | - | 1
South Korea | Seoul | South Korean won | Korean | AS | 1
South Sudan | Juba | South Sudanese pound | English | AF | 3
Spain | Madrid | euro | Spanish/Castilian | EU | 1
Sri Lanka | Sri Jayawardenepura Kotte/Kotte/Colombo | Sri Lankan rupee | Sinhala/Sinhalese/Tamil | AS | 2
Sudan | Khartoum | Sudanese pound | Arabic/English | AF | 2
Suriname | Paramaribo | Surinamese dollar | Dutch | SA | 3
Sweden | Stockholm | Swedish krona | Swedish | EU | 1
Switzerland | Bern/Berne | Swiss franc | German/French/Italian/Romansh | EU | 1
Syria | Damascus | Syrian pound | Arabic | AS | 2
Tajikistan | Dushanbe | Tajikistani somoni/somoni | Tajik | AS | 3
Tanzania | Dodoma | Tanzanian shilling | Swahili/Kiswahili/English | AF | 2
Thailand | Bangkok | Thai baht/baht | Thai | AS | 1
Timor-Leste | Dili | United States dollar/US dollar/American dollar | Tetum/Portuguese | AS | 3
Togo | Lomé | West African CFA franc/CFA franc | French | AF | 3
Tonga | Nukuʻalofa/Nuku'alofa | Tongan paʻanga/paʻanga/pa'anga | Tongan/English | OC | 3
Trinidad and Tobago | Port of Spain | Trinidad and Tobago dollar | English | CB | 3
Tunisia | Tunis | Tunisian dinar | Arabic | AF | 2
Turkey | Ankara | Turkish lira | Turkish | EU+AS | 1
Turkmenistan | Ashgabat/Ashkhabad | Turkmen manat/Turkmenistan manat/Turkmenistani manat | Turkmen | AS | 3
Tuvalu | Funafuti | Australian dollar/Tuvaluan dollar | Tuvaluan/English | OC | 3
Uganda | Kampala | Ugandan shilling | English/Swahili | AF | 2
Ukraine | Kyiv/Kiev | Ukrainian hryvnia/hryvnia/hryvna | Ukrainian | EU | 1
the United Arab Emirates | Abu Dhabi | UAE dirham/United Arab Emirates dirham/Emirati dirham | Arabic | AS | 1
the United Kingdom | London | pound sterling/British pound/sterling/pound | English | EU | 1
the United States | Washington, D.C./Washington | United States dollar/US dollar/American dollar/dollar | English | NA | 1
Uruguay | Montevideo | Uruguayan peso | Spanish | SA | 2
Uzbekistan | Tashkent | Uzbekistani som/Uzbek som | Uzbek | AS | 2
Vanuatu | Port Vila | Vanuatu vatu/vatu | Bislama/English/French | OC | 3
Vatican City | - | euro | Italian/Latin | EU | 3
Venezuela | Caracas | Venezuelan bolívar/bolívar | Spanish | SA | 2
Vietnam | Hanoi | Vietnamese đồng/Vietnamese dong/đồng/dong | Vietnamese | AS | 1
Yemen | Sanaa/Sana'a | Yemeni rial | Arabic | AS | 2
Zambia | Lusaka | Zambian kwacha | English | AF | 3
Zimbabwe | Harare | - | English/Shona/Ndebele | AF | 2
"""  # noqa: E501 (a data table: one country a line)

# Each continent also as "the <adjective> continent" ("located in the South American continent").
_CONTINENTS = {"AF": ["Africa", "African continent"], "AS": ["Asia", "Asian continent"],
               "EU": ["Europe", "European continent"], "NA": ["North America", "North American continent"],
               "CA": ["North America", "North American continent", "Central America"],
               "CB": ["North America", "North American continent", "Caribbean"],
               "SA": ["South America", "South American continent"], "OC": ["Oceania", "Australasia"]}


_COMMON_WORDS = {"real", "crown", "mark", "pound", "franc", "dollar"}


def _fold(text: str) -> str:
    """``text`` without accents ("Bogotá" -> "Bogota"); letters NFKD cannot split are kept ("ł")."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def _forms(cell: str) -> tuple[str, ...]:
    """The accepted forms of one cell, each also without its accents, in order, without repeats."""
    if cell == "-":
        return ()
    out: list[str] = []
    for form in (f.strip() for f in cell.split("/")):
        for variant in (form, _fold(form)):
            if variant and variant not in out:
                out.append(variant)
    return tuple(out)


@dataclass(frozen=True)
class Country:
    """One row of the hand-written table; each fact is a tuple of accepted forms (empty: left out)."""

    name: str  # as written in a question, with its article: "the Netherlands"
    capital: tuple[str, ...]
    currency: tuple[str, ...]
    language: tuple[str, ...]
    continent: tuple[str, ...]
    tier: int

    @property
    def key(self) -> str:
        return self.name.removeprefix("the ")

    def forms(self, relation: str) -> tuple[str, ...]:
        return getattr(self, relation)


def _parse_table() -> tuple[Country, ...]:
    rows = []
    for line in _TABLE.strip().splitlines():
        name, capital, currency, language, continent, tier = (c.strip() for c in line.split("|"))
        continents = tuple(c for code in continent.split("+") if code != "-" for c in _CONTINENTS[code])
        rows.append(Country(name, _forms(capital), _forms(currency), _forms(language), continents, int(tier)))
    # A currency's unit alone ("yen") counts only when no other country's currency has a unit of that name, and the
    # unit is not a word of the country's name (the leone of Sierra Leone) nor an everyday English word ("real").
    units: dict[str, set[str]] = {}
    for row in rows:
        for form in row.currency:
            units.setdefault(form.split()[-1].casefold(), set()).add(row.key)
    out = []
    for row in rows:
        extra = [form.split()[-1] for form in row.currency
                 if len(form.split()) > 1 and units[form.split()[-1].casefold()] == {row.key}
                 and form.split()[-1].casefold() not in row.key.casefold().split()
                 and form.split()[-1].casefold() not in _COMMON_WORDS]
        currency = row.currency + tuple(u for u in dict.fromkeys(extra) if u not in row.currency)
        out.append(Country(row.name, row.capital, currency, row.language, row.continent, row.tier))
    return tuple(out)


COUNTRIES: tuple[Country, ...] = _parse_table()


def countries() -> dict[str, Country]:
    """The table by country key (name without "the")."""
    return {c.key: c for c in COUNTRIES}


def reference_of(country: Country, relation: str) -> str:
    """The accepted forms as one ``||``-separated reference string."""
    return " || ".join(country.forms(relation))


# ------------------------------------------------------------------------------------------------------------- splits

def split_of(subject: str) -> str:
    """"validation" or "test" by the SHA-256 of the problem's subject (a country key, or an operation and its
    numbers): the same subject is always in the same split, so the splits share no subject."""
    return "test" if int(hashlib.sha256(f"real|{subject}".encode()).hexdigest(), 16) % 2 else "validation"


@dataclass(frozen=True)
class Problem:
    """One prompt with its reference and where it belongs."""

    family: str
    prompt: str  # the user message (the chat template is applied when recording)
    reference: str  # ``||``-separated for short facts; the number for arithmetic; a readable summary for country_facts
    split: str
    subject: str  # what the split hashes: the country key, or "op|numbers"
    detail: str = ""  # e.g. "capital tier=2", "×", "add_sub"
    matcher: str = "contains"  # the matcher of the label ("facts" for country_facts: judge_facts)


# --------------------------------------------------------------------------------------------------- short facts

_SHORT_TEMPLATES = {
    "capital": "What is the capital of {x}? Answer in a few words.",
    "currency": "What is the currency of {x}? Answer in a few words.",
    "language": "What is the official language of {x}? Answer in a few words.",
    "continent": "On which continent is {x}? Answer in a few words.",
}


def short_fact_problems(split: str, *, n: int | None = None, relations: Sequence[str] = RELATIONS,
                        tier_weights: dict[int, float] | None = None, seed: int = 0) -> list[Problem]:
    """Short fact questions about the split's countries (every (country, relation) pair with a fact by default).

    ``n`` draws that many pairs without replacement, each with weight ``tier_weights[tier]`` (default 1 for every
    tier): the knob that sets the difficulty (rarer countries are harder), chosen per family, never per question."""
    pairs = [(c, r) for c in COUNTRIES if split_of(c.key) == split for r in relations if c.forms(r)]
    if n is not None and n < len(pairs):
        rng = np.random.default_rng(int(hashlib.sha256(f"short|{split}|{seed}".encode()).hexdigest()[:8], 16))
        weights = np.array([(tier_weights or {}).get(c.tier, 1.0) for c, _ in pairs], dtype=float)
        chosen = rng.choice(len(pairs), size=n, replace=False, p=weights / weights.sum())
        pairs = [pairs[i] for i in sorted(chosen)]
    return [Problem("short_facts", _SHORT_TEMPLATES[r].format(x=c.name), reference_of(c, r), split, c.key,
                    f"{r} tier={c.tier}", "contains") for c, r in pairs]


# ---------------------------------------------------------------------------------------------------- arithmetic

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "×": lambda a, b: a * b}


def _rng(name: str, split: str, seed: int) -> random.Random:
    return random.Random(f"{name}-{split}-{seed}")


#: Operand ranges of an arithmetic problem's size: (first number, second number).
ARITHMETIC_SIZES = {"small": ((2, 12), (2, 12)), "mixed": ((10, 99), (2, 9)), "two-digit": ((10, 99), (10, 99))}
#: The default mix, in turn: SmolLM2-135M got 40-50% of small problems right in the pilot, 6-12% of mixed ones and
#: 0-12% of two-digit ones, so a two-digit-only family would sit far below the 25-75% the datasets aim for.
DEFAULT_ARITHMETIC_SIZES = ("small", "small", "small", "mixed", "two-digit")


def arithmetic_problems(n: int, *, split: str, seed: int = 0, ops: Sequence[str] = ("+", "-", "×"),
                        sizes: Sequence[str] = DEFAULT_ARITHMETIC_SIZES) -> list[Problem]:
    """``n`` distinct "What is a op b?" problems of the split: problem ``i`` has operation ``ops[i % len(ops)]``
    and size ``sizes[(i // len(ops)) % len(sizes)]`` (:data:`ARITHMETIC_SIZES`), so every operation comes in every
    size; a difference is never negative (the larger number first). The subject is the operation and the numbers
    (unordered for + and ×); the detail is "<op> <size>"."""
    rng = _rng("arith", split, seed)

    def draw(i: int) -> tuple[str, Callable[[], Problem]]:
        op = ops[i % len(ops)]
        size = sizes[(i // len(ops)) % len(sizes)]
        (a_low, a_high), (b_low, b_high) = ARITHMETIC_SIZES[size]
        a, b = rng.randint(a_low, a_high), rng.randint(b_low, b_high)
        if op == "-" and b > a:
            a, b = b, a
        subject = f"{op}|{min(a, b)}|{max(a, b)}" if op in "+×" else f"{op}|{a}|{b}"
        return subject, lambda: Problem("arithmetic", f"What is {a} {op} {b}?", str(_OPS[op](a, b)), split, subject,
                                        f"{op} {size}", "numeric")

    return draw_distinct(n, split, draw, split_of=split_of, what="arithmetic problems", tries=1000)


_NAMES = [("Ana", "she"), ("Ben", "he"), ("Cara", "she"), ("Dev", "he"), ("Eli", "he"), ("Fay", "she"),
          ("Gus", "he"), ("Hana", "she"), ("Ivo", "he"), ("Jun", "he"), ("Kai", "he"), ("Lea", "she"),
          ("Milo", "he"), ("Nia", "she"), ("Omar", "he"), ("Pia", "she"), ("Ravi", "he"), ("Sara", "she"),
          ("Tom", "he"), ("Uma", "she")]
_ITEMS = ["apples", "books", "coins", "shells", "stamps", "marbles", "cards", "pencils", "stickers", "beads"]
_STEPS = " Work it out step by step, then write 'Answer:' and the number."
#: The story kinds of a word problem: (kind, template, value of (a, b, c)); two steps each.
WORD_KINDS = (
    ("buy_give", "{n} has {a} {item}. {P} buys {b} more, then gives {c} away. How many {item} does {p} have now?",
     lambda a, b, c: a + b - c),
    ("give_find", "{n} has {a} {item}. {P} gives {c} away, then finds {b} more. How many {item} does {p} have now?",
     lambda a, b, c: a - c + b),
    ("get_get", "{n} has {a} {item}. {m} gives {o} {b} more, and then {c} more. How many {item} does {p} have now?",
     lambda a, b, c: a + b + c),
    ("lose_lose", "{n} has {a} {item}. {P} loses {b} of them, then {c} more. How many {item} does {p} have left?",
     lambda a, b, c: a - b - c),
)


def word_problems(n: int, *, split: str, seed: int = 0, high: int = 12) -> list[Problem]:
    """``n`` distinct two-step word problems of the split (the kinds of :data:`WORD_KINDS` in turn): ``a`` in
    [3, ``high``], ``b`` in [2, 6], ``c`` in [1, 4]; no count is ever negative, at the end or in between. The prompt
    ends by asking for the steps and an "Answer:" line. The subject is the kind and its numbers; the detail is the
    kind."""
    rng = _rng("word", split, seed)

    def draw(i: int) -> tuple[str, Callable[[], Problem]] | None:
        kind, template, value = WORD_KINDS[i % len(WORD_KINDS)]
        a, b, c = rng.randint(3, high), rng.randint(2, 6), rng.randint(1, 4)
        if value(a, b, c) < 0 or (kind == "give_find" and c > a):  # never more given away than held
            return None

        def make() -> Problem:  # names and items are drawn only for a problem kept
            (name, pronoun), (other, _) = rng.sample(_NAMES, 2)
            prompt = template.format(n=name, p=pronoun, P=pronoun.capitalize(), m=other,
                                     o="him" if pronoun == "he" else "her", a=a, b=b, c=c, item=rng.choice(_ITEMS))
            return Problem("word_problems", prompt + _STEPS, str(value(a, b, c)), split, f"{kind}|{a}|{b}|{c}",
                           kind, "numeric")

        return f"{kind}|{a}|{b}|{c}", make

    return draw_distinct(n, split, draw, split_of=split_of, what="word problems", tries=1000)


# ------------------------------------------------------------------------------------------------- country facts

_LONG_TEMPLATE = "Write a short paragraph about {x}. Say what its capital is and what its official language is."


def country_fact_problems(split: str, *, n: int | None = None, tier_weights: dict[int, float] | None = None,
                          seed: int = 0, tiers: Sequence[int] = LONG_TIERS) -> list[Problem]:
    """The long question for the split's countries of ``tiers`` that have every fact of :data:`LONG_RELATIONS`
    (``n`` of them drawn with ``tier_weights``, as in :func:`short_fact_problems`)."""
    rows = [c for c in COUNTRIES
            if split_of(c.key) == split and c.tier in tiers and all(c.forms(r) for r in LONG_RELATIONS)]
    if n is not None and n < len(rows):
        rng = np.random.default_rng(int(hashlib.sha256(f"long|{split}|{seed}".encode()).hexdigest()[:8], 16))
        weights = np.array([(tier_weights or {}).get(c.tier, 1.0) for c in rows], dtype=float)
        rows = [rows[i] for i in sorted(rng.choice(len(rows), size=n, replace=False, p=weights / weights.sum()))]
    return [Problem("country_facts", _LONG_TEMPLATE.format(x=c.name),
                    " | ".join(f"{r} = {' / '.join(c.forms(r))}" for r in LONG_RELATIONS), split, c.key,
                    f"tier={c.tier}", "facts") for c in rows]


# ---------------------------------------------------------------------------------------- per-fact judgement

# Words that say which fact a clause is about: the first match of the first pattern, else of the second (so the
# "spoken" of "the most widely spoken currency" is not taken for the language when "language" is in the answer).
_FIRST_KEYWORDS = {
    "capital": re.compile(r"\bcapital\b", re.IGNORECASE),
    "currency": re.compile(r"\bcurrenc(?:y|ies)\b", re.IGNORECASE),
    "language": re.compile(r"\blanguages?\b", re.IGNORECASE),
}
_KEYWORDS = {
    "capital": re.compile(r"\bcapital\b|\bseat of government\b", re.IGNORECASE),
    "currency": re.compile(r"\bcurrenc(?:y|ies)\b|\bmoney\b|\blegal tender\b", re.IGNORECASE),
    "language": re.compile(r"\blanguages?\b|\bspeaks?\b|\bspoken\b|\btongue\b", re.IGNORECASE),
}
# Where one clause ends and the next begins inside a sentence.
_CLAUSE_BREAK = re.compile(r"[,;]|\band\b|\bwhile\b|\bwhereas\b|\bbut\b", re.IGNORECASE)
# A copula (or colon) after the keyword: the value follows it ("The capital is Paris", "Capital: Paris").
_CUE_AFTER = re.compile(r"\b(?:is|are|was|were|remains|called|named)\b|:", re.IGNORECASE)
# A verb before the keyword that takes the value as its object ("It uses the euro as its currency").
_CUE_BEFORE = re.compile(r"\b(?:uses?|using|speaks?|speaking|has|have|adopted)\b", re.IGNORECASE)
# "<subject> is the official <keyword>": the subject is the value.
_SUBJECT = re.compile(r"\W*(?:(?:the|a|an)\s+)?(?P<value>\w.*?)\s+(?:is|are|was|were)\s+"
                      r"(?:(?:the|a|an|one of the|its|their|official|national|main|primary|only|current)\s+)*"
                      r"(?:[\w-]+\s+){0,2}", re.IGNORECASE | re.DOTALL)
# "<value>, the capital of X, is ...": the value in apposition before the keyword.
_APPOSED = re.compile(r"\W*(?P<value>\w[^,]*?)\s*,\s*(?:(?:the|its|their|official|national|main)\s+)*",
                      re.IGNORECASE | re.DOTALL)
# What may stand between a keyword and its value when no copula does: "capital city of Kano".
_FILLER = re.compile(r"[\s,:;'’\"()\-–—]+|(?:city|town|of|being|the|a|an|called|named|s)\b", re.IGNORECASE)
_ARTICLE = re.compile(r"(?:(?:the|a|an)\b|[\s\"'“”‘’*(\-–—:])+", re.IGNORECASE)
_ABBREVIATIONS = ("St", "Mr", "Mrs", "Dr", "No", "approx", "e.g", "i.e", "vs", "etc")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence: text ends at ".", "!" or "?" followed by whitespace (not after an initial such
    as the "S" of "U.S.", nor after "St", "Dr", ...), or at a line break."""
    spans, start = [], 0
    for match in re.finditer(r"[.!?]+\s+|\n+", text):
        if match.group()[0] == ".":
            before = re.search(r"(\w+)$", text[:match.start()])
            word = before.group(1) if before else ""
            if (len(word) == 1 and word.isupper()) or word in _ABBREVIATIONS:
                continue
        spans.append((start, match.start() + (0 if match.group()[0] == "\n" else 1)))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def _contains(text: str, forms: Sequence[str]) -> bool:
    from trace_core.data.labels import label_from_reference

    return bool(forms) and label_from_reference(text, list(forms), matcher="contains") == 1


@dataclass(frozen=True)
class FactVerdict:
    """How one fact is stated in an answer.

    ``status`` is "right" (an accepted form is in the fact's clause, or anywhere in the answer when no clause names
    the fact), "wrong" (a clause names the fact but holds no accepted form) or "missing" (no clause names it and no
    accepted form is anywhere). ``clause`` is the (start, end) of the clause in the answer (None when missing);
    ``value_start`` the character where the stated value begins and ``first_wrong`` the first character of the value
    that departs from the accepted form it follows longest, compared case-insensitively ("Yerei" for "Yerevan": the
    "i"; "Bhutanese kinese" for "Bhutanese ngultrum": the "k"), both None unless the fact is wrong."""

    relation: str
    status: str
    clause: tuple[int, int] | None = None
    value_start: int | None = None
    first_wrong: int | None = None


def _clause(answer: str, relation: str, sentence: tuple[int, int], keyword: re.Match) -> tuple[int, int]:
    """The part of ``sentence`` about ``relation``: bounded, when another fact's keyword shares the sentence, by the
    last clause break between the two keywords (or the other keyword itself when there is none)."""
    left, right = sentence
    for other, pattern in _KEYWORDS.items():
        if other == relation:
            continue
        for hit in pattern.finditer(answer, sentence[0], sentence[1]):
            if hit.end() <= keyword.start():
                breaks = list(_CLAUSE_BREAK.finditer(answer, hit.end(), keyword.start()))
                left = max(left, breaks[-1].end() if breaks else hit.end())
            elif hit.start() >= keyword.end():
                breaks = list(_CLAUSE_BREAK.finditer(answer, keyword.end(), hit.start()))
                right = min(right, breaks[-1].start() if breaks else hit.start())
    return left, right


def _value_start(answer: str, clause: tuple[int, int], keyword: re.Match, country: str) -> int:
    """Where the stated value begins in its clause (``country``: the country's name), by the first rule that applies:

    a. the clause opens with "<subject> is the (official) <keyword>" (up to two other words before the keyword:
       "Tonga is a Polynesian language"), or with "<subject>, the <keyword> ...," (an
       apposition, when no copula follows the keyword directly): the subject is the value ("Sydney is the capital",
       "Gabon is the official currency", "Burgkabu, the capital of Burkina Faso, is a city");
    b. a copula ("is", "are", "was", "called", ...) or colon follows the keyword: the value follows it ("The capital
       is Paris", "Capital: Paris"), or follows the first comma between them (an appositive: "Its capital, Nairobi,
       is a port"); not a copula after "which", "that", "who" ("its language, which is rare");
    c. a capitalised word follows the keyword, past "city", "of", "being", articles, punctuation and the country's
       name: that word ("a capital city of Kano", "a single currency, the Chilean dollar");
    d. a verb such as "uses", "speaks", "has" comes before the keyword: the value is its object ("It uses the dollar
       as its currency", "It has English as its official language, which ...");
    e. any other word follows the keyword so: that word ("its currency being the kena");
    f. else the clause's start.

    Then spaces, quotes, dashes and the articles "the", "a", "an" are skipped.
    """
    left, right = clause
    after = _CUE_AFTER.search(answer, keyword.end(), right)
    if after and re.search(r"\b(?:which|that|who|whose|where)\b", answer[keyword.end():after.start()], re.I):
        after = None  # the copula of a relative clause: "its language, which is rare"
    before = list(_CUE_BEFORE.finditer(answer, left, keyword.start()))
    subject = _SUBJECT.fullmatch(answer, left, keyword.start())
    if subject is None and (after is None or answer[keyword.end():after.start()].rstrip().endswith(",")):
        subject = _APPOSED.fullmatch(answer, left, keyword.start())
    filler = re.compile(_FILLER.pattern + r"|\b" + re.escape(country) + r"\b", re.IGNORECASE)
    rest = keyword.end()
    while (skip := filler.match(answer, rest, right)) and skip.end() > rest:
        rest = skip.end()
    if subject:
        start = subject.start("value")
    elif after:
        start = after.end()
        comma = answer.find(",", keyword.end(), after.start())
        if comma >= 0 and answer[comma + 1:after.start()].strip(" ,"):
            start = comma + 1
    elif re.match(r"[^\W\d_]", answer[rest:right]) and answer[rest].isupper():
        start = rest
    elif before:
        start = before[-1].end()
    elif re.match(r"\w", answer[rest:right]):
        start = rest
    else:
        start = left
    skipped = _ARTICLE.match(answer, start, right)
    return skipped.end() if skipped and skipped.end() < right else start


def _departure(answer: str, start: int, forms: Sequence[str]) -> int:
    """``start`` moved past the longest case-insensitive prefix of the answer there that an accepted form shares (at
    most to the answer's last character)."""
    best = 0
    for form in forms:
        n = 0
        while n < len(form) and start + n < len(answer) and answer[start + n].casefold() == form[n].casefold():
            n += 1
        best = max(best, n)
    return min(start + best, len(answer) - 1)


def judge_facts(answer: str, country: Country, relations: Sequence[str] = JUDGED_RELATIONS) -> list[FactVerdict]:
    """Per fact of ``relations``: is it stated in ``answer``, and is it right?

    1. The answer is cut into sentences (:func:`sentence_spans`).
    2. A fact's clause: the sentence of the first match of its keyword ("capital"; "currency", else "money" or
       "legal tender"; "language", else "speak" or "spoken"), cut at the last clause break (",", ";", "and", "while",
       "but") before or after another fact's keyword in the same sentence, so "The capital is Paris, its currency is
       the euro and its language is French" gives each fact its own clause.
    3. The fact is right when an accepted form is in its clause (``contains``: whole words after normalize_answer),
       wrong when not; with no keyword in the answer, right when an accepted form is anywhere, else missing.
    4. A wrong fact's value start is found by the rules of :func:`_value_start` (after the copula that follows the
       keyword, "The capital is Kano"; the subject of "Kano is the capital"; ...), and its first wrong character is
       the first one there that departs from the accepted form the value follows longest.
    """
    verdicts = []
    sentences = sentence_spans(answer)
    for relation in relations:
        forms = country.forms(relation)
        keyword = _FIRST_KEYWORDS[relation].search(answer) or _KEYWORDS[relation].search(answer)
        if keyword is None:
            verdicts.append(FactVerdict(relation, "right" if _contains(answer, forms) else "missing"))
            continue
        sentence = next((s for s in sentences if s[0] <= keyword.start() < s[1]), (0, len(answer)))
        clause = _clause(answer, relation, sentence, keyword)
        if _contains(answer[clause[0]:clause[1]], forms):
            verdicts.append(FactVerdict(relation, "right", clause))
        else:
            start = _value_start(answer, clause, keyword, country.key)
            verdicts.append(FactVerdict(relation, "wrong", clause, start, _departure(answer, start, forms)))
    return verdicts


def locate_first_wrong(verdicts: Sequence[FactVerdict]) -> tuple[str | None, int | None]:
    """The first wrong fact in the answer's order (the wrong fact whose value starts first) and its first wrong
    character (``FactVerdict.first_wrong``); (None, None) when no fact is stated wrong (all right, or the wrong ones
    are missing)."""
    wrong = [v for v in verdicts if v.status == "wrong" and v.value_start is not None]
    if not wrong:
        return None, None
    first = min(wrong, key=lambda v: v.value_start)
    return first.relation, first.first_wrong


def first_wrong_token_of(tokens: Sequence[str], answer: str, position: int | None) -> int | None:
    """The index of the token whose characters cover ``position`` of ``answer`` (a token " US" covers its leading
    space and "US"); None when there is no position or the tokens do not spell the answer."""
    if position is None or "".join(tokens) != answer or not 0 <= position < len(answer):
        return None
    ends = np.cumsum([len(t) for t in tokens])
    return int(np.searchsorted(ends, position, side="right"))


def fact_detail(verdicts: Sequence[FactVerdict]) -> str:
    """``wrong=currency+language missing=language`` (missing facts are also wrong), or ``wrong=none``."""
    wrong = [v.relation for v in verdicts if v.status != "right"]
    missing = [v.relation for v in verdicts if v.status == "missing"]
    text = f"wrong={'+'.join(wrong) if wrong else 'none'}"
    return text + (f" missing={'+'.join(missing)}" if missing else "")


# ------------------------------------------------------------------------------------------------------- labels

def label_of(problem: Problem, answer: str) -> tuple[int, str, int | None]:
    """(label, detail, first wrong character or None) of ``answer`` to ``problem``.

    - short facts: the problem's matcher over the reference's forms; for a wrong capital, currency or language
      answer, the first wrong character is the value's start found as in :func:`judge_facts` (None for continents
      and for any subject that is not a country, such as an element).
    - arithmetic and word problems: ``numeric`` on the last number; the first wrong character is where the last
      number departs from the reference (``bench.localisation.first_wrong_char``).
    - paragraphs (matcher ``"facts"``): 1 only when :func:`judge_facts` finds every asked fact right (both of
      :data:`LONG_RELATIONS` for country facts; the one named first in the detail otherwise); the detail names the
      wrong (and missing) facts; the first wrong character is the start of the first wrong fact's value.
    """
    from trace_core.data.labels import label_from_reference

    if problem.matcher == "facts":
        relations = LONG_RELATIONS if problem.family == "country_facts" else [problem.detail.split()[0]]
        verdicts = judge_facts(answer, countries()[problem.subject], relations)
        label = int(all(v.status == "right" for v in verdicts))
        _, position = locate_first_wrong(verdicts)
        return label, f"{problem.detail} {fact_detail(verdicts)}", None if label else position
    label = label_from_reference(answer, problem.reference, matcher=problem.matcher)
    if label:
        return 1, problem.detail, None
    if problem.matcher == "numeric":
        from bench.localisation import first_wrong_char

        return 0, problem.detail, first_wrong_char(answer, problem.reference)
    relation = problem.detail.split()[0]
    if relation not in JUDGED_RELATIONS:  # a continent, or an element's name
        return 0, problem.detail, None
    _, position = locate_first_wrong(judge_facts(answer, countries()[problem.subject], [relation]))
    return 0, problem.detail, position


def labeled(problem: Problem, tokens: Sequence[str], answer: str) -> tuple[int, str, int | None, int | None]:
    """(label, detail, first wrong character, first wrong token) of an answer and its tokens (:func:`label_of`,
    then :func:`first_wrong_token_of`): one row's labelling, for every builder."""
    label, detail, position = label_of(problem, answer)
    return label, detail, position, first_wrong_token_of(tokens, answer, position)
