"""Column value generators of the demo database: one function per value kind, each filling a whole column."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta

from dbtools.demo import vocabulary as v

EPOCH = datetime(2019, 1, 1)
SPAN_SECONDS = int((datetime(2025, 6, 30) - EPOCH).total_seconds())

COUNTRY_NAMES = [c[2] for c in v.COUNTRIES]
COMPANIES = [f"{stem} {suffix}" for stem, suffix in itertools.product(v.COMPANY_STEMS, v.COMPANY_SUFFIXES)]
PRODUCTS = [f"{adj} {noun}" for adj, noun in itertools.product(v.PRODUCT_ADJECTIVES, v.PRODUCT_NOUNS)]

# Lists drawn uniformly by simple kinds (`pick:NAME` or the kind name itself).
LISTS: dict[str, Sequence[str]] = {
    "COLORS": v.COLORS,
    "JOB_TITLES": v.JOB_TITLES,
    "AB": ["A", "B"],
    "PROJECT_ROLES": [
        "Developer",
        "Tester",
        "Architect",
        "Project Manager",
        "Designer",
        "Analyst",
        "Consultant",
    ],
    "APP_ROLES": [
        "admin",
        "analyst",
        "viewer",
        "editor",
        "auditor",
        "support",
        "finance",
        "hr",
        "sales",
        "warehouse",
        "marketing",
        "readonly",
    ],
    "first_name": v.FIRST_NAMES,
    "last_name": v.LAST_NAMES,
    "company": COMPANIES,
    "product": PRODUCTS,
    "country": COUNTRY_NAMES,
    "word": v.WORDS,
    "carrier": [
        "DHL Express",
        "UPS",
        "FedEx",
        "DPD",
        "GLS",
        "Hermes",
        "La Poste Colissimo",
        "Royal Mail",
        "PostNL",
        "USPS",
        "Canada Post",
        "Japan Post",
        "TNT",
        "Aramex",
        "Correos",
    ],
    "sales_region": [
        "EMEA North",
        "EMEA South",
        "DACH",
        "Benelux",
        "Nordics",
        "UK & Ireland",
        "North America East",
        "North America West",
        "LATAM",
        "APAC North",
        "APAC South",
        "Middle East & Africa",
    ],
    "bank": [
        "Deutsche Bank",
        "Commerzbank",
        "BNP Paribas",
        "HSBC",
        "Barclays",
        "JPMorgan Chase",
        "Santander",
        "ING",
        "UBS",
        "Nordea",
        "Rabobank",
        "Intesa Sanpaolo",
    ],
    "cost_center": [
        "Corporate Overhead",
        "Field Sales",
        "Inside Sales",
        "Platform Engineering",
        "Data Team",
        "Warehouse Operations",
        "Fleet",
        "Customer Care",
        "Brand Marketing",
        "Performance Marketing",
        "Recruiting",
        "Payroll",
        "Legal Affairs",
        "Facilities Management",
        "Procurement Office",
    ],
    "gl_account": [
        "Cash",
        "Accounts Receivable",
        "Inventory",
        "Prepaid Expenses",
        "Fixed Assets",
        "Accumulated Depreciation",
        "Accounts Payable",
        "Accrued Liabilities",
        "VAT Payable",
        "Retained Earnings",
        "Product Revenue",
        "Service Revenue",
        "Cost of Goods Sold",
        "Salaries Expense",
        "Rent Expense",
        "Travel Expense",
        "Marketing Expense",
        "Depreciation Expense",
        "Bank Fees",
        "Interest Income",
    ],
    "expense_category": [
        "Travel",
        "Meals",
        "Lodging",
        "Office Supplies",
        "Software",
        "Training",
        "Mileage",
        "Client Entertainment",
        "Telephone",
        "Other",
    ],
    "tax_name": ["VAT", "GST", "Sales Tax", "MwSt", "TVA", "IVA", "Consumption Tax"],
    "software": [
        "Microsoft 365",
        "Slack",
        "Jira",
        "Confluence",
        "Salesforce",
        "Zoom",
        "Adobe Creative Cloud",
        "GitHub Enterprise",
        "Tableau",
        "SAP S/4HANA",
        "Workday",
        "Zendesk",
        "HubSpot",
        "DocuSign",
    ],
    "sensor_unit": ["°C", "bar", "mm/s", "%RH", "rpm", "kW"],
    "tz": [
        "Europe/Berlin",
        "Europe/London",
        "Europe/Paris",
        "America/New_York",
        "America/Chicago",
        "America/Los_Angeles",
        "America/Sao_Paulo",
        "Asia/Tokyo",
        "Asia/Shanghai",
        "Asia/Kolkata",
        "Asia/Singapore",
        "Australia/Sydney",
        "Africa/Johannesburg",
        "Asia/Dubai",
        "America/Toronto",
    ],
    "region": [
        "Bavaria",
        "Hesse",
        "Saxony",
        "Île-de-France",
        "Provence",
        "Catalonia",
        "Andalusia",
        "Lombardy",
        "Tuscany",
        "California",
        "Texas",
        "New York State",
        "Ontario",
        "Quebec",
        "New South Wales",
        "Victoria",
        "Queensland",
        "Scotland",
        "Wales",
        "Flanders",
        "Wallonia",
        "Zurich Canton",
        "Tyrol",
        "Maharashtra",
        "Karnataka",
        "Guangdong",
        "Kanto",
        "Gauteng",
        "Lagos State",
        "Jalisco",
    ],
    "factory": [
        "Leipzig Plant",
        "Lyon Works",
        "Austin Assembly",
        "Shenzhen Facility",
        "Pune Plant",
        "Monterrey Works",
        "Brno Assembly",
        "Osaka Facility",
    ],
    "training": [
        "Workplace Safety Basics",
        "Advanced SQL",
        "Leadership Essentials",
        "GDPR Awareness",
        "Negotiation Skills",
        "Forklift Certification",
        "First Aid",
        "Python for Analysts",
        "Effective Presentations",
        "Lean Manufacturing",
        "Customer Empathy",
        "Time Management",
    ],
    "campaign": [
        "Spring Sale",
        "Black Friday",
        "Cyber Monday",
        "Summer Clearance",
        "Back to School",
        "Holiday Gift Guide",
        "New Year Kickoff",
        "Loyalty Double Points",
        "Free Shipping Week",
        "Product Launch",
        "Brand Awareness",
        "Retargeting",
    ],
    "project": [
        "ERP Migration",
        "Website Relaunch",
        "Data Warehouse",
        "Mobile App",
        "CRM Rollout",
        "Warehouse Automation",
        "Security Audit",
        "Cloud Migration",
        "Pricing Engine",
        "Customer Portal",
    ],
    "deal_name": [
        "Annual Renewal",
        "Enterprise License",
        "Pilot Project",
        "Upsell",
        "Framework Agreement",
        "Hardware Refresh",
        "Support Contract",
        "Expansion",
    ],
    "warehouse": [
        "Central Warehouse",
        "North Hub",
        "South Hub",
        "East Depot",
        "West Depot",
        "Returns Center",
        "Cross-Dock",
        "Cold Storage",
    ],
    "office": ["Headquarters", "Sales Office", "Engineering Hub", "Support Center", "Regional Office"],
    "line_name": ["Assembly", "Packaging", "Painting", "Welding", "Testing", "Moulding", "Cutting"],
}


def zipf_weights(count: int, skew: float) -> list[float]:
    """Cumulative Zipf-like weights: item k has weight 1 / (k + 1) ** skew."""
    return list(itertools.accumulate(1.0 / (k + 1) ** skew for k in range(count)))


def skewed_keys(rng: random.Random, n: int, count: int, skew: float) -> list[int]:
    """n keys in 1..count, Zipf-skewed by rank; ranks are scattered over the key range by a coprime stride."""
    ranks = rng.choices(range(count), cum_weights=zipf_weights(count, skew), k=n)
    stride = next(s for s in (7919, 104729, 1299709, 1) if count % s != 0 or s == 1)
    return [(r * stride) % count + 1 for r in ranks]


def skewed_pick(rng: random.Random, n: int, items: Sequence, skew: float) -> list:
    return rng.choices(items, cum_weights=zipf_weights(len(items), skew), k=n)


def _timestamps(rng: random.Random, n: int) -> list[str]:
    return [(EPOCH + timedelta(seconds=rng.randrange(SPAN_SECONDS))).isoformat(sep=" ") for _ in range(n)]


def _dates(
    rng: random.Random, n: int, start: date = EPOCH.date(), days: int = SPAN_SECONDS // 86400
) -> list[str]:
    return [(start + timedelta(days=rng.randrange(days))).isoformat() for _ in range(n)]


def _sentences(rng: random.Random, n: int, words: int) -> list[str]:
    out = []
    for _ in range(n):
        chosen = rng.choices(v.WORDS, k=rng.randint(max(2, words // 2), words))
        out.append(" ".join(chosen).capitalize() + ".")
    return out


def _emails(rng: random.Random, n: int) -> list[str]:
    return [
        f"{f.lower()}.{last.lower().replace(' ', '').replace(chr(39), '')}{k}@{d}"
        for f, last, k, d in zip(
            rng.choices(v.FIRST_NAMES, k=n),
            rng.choices(v.LAST_NAMES, k=n),
            rng.sample(range(10 * n + 10), n),
            rng.choices(v.EMAIL_DOMAINS, k=n),
            strict=True,
        )
    ]


def _full_names(rng: random.Random, n: int) -> list[str]:
    return [
        f"{first} {last}"
        for first, last in zip(rng.choices(v.FIRST_NAMES, k=n), rng.choices(v.LAST_NAMES, k=n), strict=True)
    ]


def _letters(rng: random.Random, count: int) -> str:
    return "".join(rng.choices("ABCDEFGHJKLMNPRSTUVWXYZ", k=count))


SIMPLE: dict[str, Callable[[random.Random, int], list]] = {
    "ts": _timestamps,
    "date": _dates,
    "birth_date": lambda rng, n: _dates(rng, n, date(1950, 1, 1), 55 * 365),
    "email": _emails,
    "full_name": _full_names,
    "phone": lambda rng, n: [
        f"+{rng.choice((1, 33, 44, 49, 34, 39, 81, 61))} {rng.randrange(100, 999)} "
        f"{rng.randrange(1000000, 9999999)}"
        for _ in range(n)
    ],
    "street": lambda rng, n: [f"{s} {rng.randint(1, 250)}" for s in rng.choices(v.STREET_NAMES, k=n)],
    "zip": lambda rng, n: [f"{rng.randrange(10000, 99999)}" for _ in range(n)],
    "url": lambda rng, n: [
        f"https://cdn.example.com/{rng.choice(v.WORDS)}/{rng.getrandbits(40):010x}" for _ in range(n)
    ],
    "username": lambda rng, n: [
        f"{f.lower()}{k}"
        for f, k in zip(rng.choices(v.FIRST_NAMES, k=n), rng.sample(range(1000, 99999), n), strict=True)
    ],
    "ip": lambda rng, n: [".".join(str(rng.randrange(1, 255)) for _ in range(4)) for _ in range(n)],
    "lat": lambda rng, n: [round(rng.uniform(-60, 70), 5) for _ in range(n)],
    "lon": lambda rng, n: [round(rng.uniform(-180, 180), 5) for _ in range(n)],
    "aisle": lambda rng, n: [f"{_letters(rng, 1)}{rng.randint(1, 30):02d}" for _ in range(n)],
    "plate": lambda rng, n: [
        f"{_letters(rng, 2)}-{_letters(rng, 2)} {rng.randint(100, 9999)}" for _ in range(n)
    ],
    "scac": lambda rng, n: [_letters(rng, 4) for _ in range(n)],
    "iban": lambda rng, n: [f"DE{rng.randrange(10, 99)}{rng.randrange(10**17, 10**18)}" for _ in range(n)],
    "tracking": lambda rng, n: [f"1Z{rng.getrandbits(60):016X}" for _ in range(n)],
    "coupon": lambda rng, n: [f"{rng.choice(v.WORDS).upper()}{rng.randint(5, 50)}" for _ in range(n)],
}


def generate(kind: str, rng: random.Random, n: int, skew: float) -> list:
    """Values of one column of n rows for a value kind such as `email`, `enum:order_status` or `int:1:10`."""
    name, _, arg = kind.partition(":")
    if kind in SIMPLE:
        return SIMPLE[kind](rng, n)
    if name == "pick" or kind in LISTS:
        return rng.choices(LISTS[arg or kind], k=n)
    if name == "enum":
        return skewed_pick(rng, n, v.ENUMS[arg], skew)
    if name == "code":
        prefix, width = arg.split(":")
        return [f"{prefix}-{i:0{width}d}" for i in range(1, n + 1)]
    if name == "int":
        low, high = map(int, arg.split(":"))
        return [rng.randint(low, high) for _ in range(n)]
    if name == "money":
        low, high = map(float, arg.split(":"))
        return [round(rng.uniform(low, high), 2) for _ in range(n)]
    if name == "real":
        low, high = map(float, arg.split(":"))
        return [round(rng.uniform(low, high), 4) for _ in range(n)]
    if name == "bool":
        p = float(arg)
        return [int(rng.random() < p) for _ in range(n)]
    if name == "text":
        return _sentences(rng, n, int(arg))
    if name == "hex":
        digits = int(arg)
        return [f"{rng.getrandbits(4 * digits):0{digits}X}" for _ in range(n)]
    raise ValueError(f"unknown value kind {kind!r}")


def make_unique(values: list) -> list:
    """Suffix repeated values with a counter so a UNIQUE column holds distinct values."""
    used: set = set()
    out = []
    for value in values:
        candidate, count = value, 1
        while candidate in used:
            count += 1
            candidate = f"{value} {count}"
        used.add(candidate)
        out.append(candidate)
    return out
