"""Word tables of the generated WebShop catalogue.

Five top-level categories as in WebShop (beauty, electronics, fashion, food, furniture), six product
types each. A type fixes the Amazon-style category path, the search query its products were
"scraped" under (WebShop's ``query`` field), the words of its titles, a pool of attributes (short
lowercase phrases such as WebShop's ``items_ins_v2`` attributes) and its option dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    """One kind of product of the generated catalogue.

    Attributes:
        category: WebShop's top-level category (``beauty``, ``fashion``, ...).
        noun: how instructions name the product (``running shoes``).
        title: the type words of titles (``Running Shoes``).
        query: the search query its products were listed under (WebShop's ``query``).
        path: the category path, levels joined by `` › `` (WebShop's ``product_category``).
        attributes: the attribute pool products of this type draw from.
        options: option dimensions, ``(name, value kind)``; value kinds index :data:`OPTION_VALUES`.
    """

    category: str
    noun: str
    title: str
    query: str
    path: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]


OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "color": (
        "black", "white", "grey", "navy blue", "red", "green", "beige", "pink",
        "brown", "purple", "sky blue", "yellow", "orange", "khaki",
    ),
    "device color": ("black", "white", "silver", "space grey", "blue", "red", "green", "rose gold"),
    "wood color": ("walnut", "oak", "espresso", "white", "black", "grey", "natural", "cherry"),
    "clothing size": ("x-small", "small", "medium", "large", "x-large", "xx-large"),
    "shoe size": ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12"),
    "scent": ("lavender", "vanilla", "unscented", "eucalyptus", "citrus", "rose", "coconut", "sandalwood"),
    "liquid size": ("2 fl oz", "8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz"),
    "jar size": ("1 oz", "1.7 oz", "2.5 oz", "4 oz"),
    "hair length": ("14 inch", "16 inch", "18 inch", "20 inch", "22 inch", "24 inch"),
    "hair color": ("natural black", "dark brown", "light brown", "blonde", "ash blonde", "auburn"),
    "phone model": ("iphone 12", "iphone 13", "iphone 14", "iphone 15", "galaxy s22", "galaxy s23", "pixel 7"),
    "cable length": ("3 feet", "6 feet", "10 feet", "15 feet", "25 feet"),
    "wattage": ("20w", "30w", "45w", "65w", "100w"),
    "tv size": ("32-55 inch", "37-70 inch", "42-75 inch", "50-86 inch"),
    "coffee flavor": ("original", "french vanilla", "hazelnut", "caramel", "mocha", "colombian"),
    "bar flavor": ("chocolate chip", "peanut butter", "cookie dough", "mixed berry", "salted caramel", "almond"),
    "tea flavor": ("peppermint", "chamomile", "ginger lemon", "hibiscus", "rooibos", "green mint"),
    "chip flavor": ("sea salt", "barbecue", "sour cream onion", "salt vinegar", "jalapeno", "cheddar"),
    "candy flavor": ("sour", "tropical", "mixed fruit", "cherry", "watermelon", "peach"),
    "food pack": ("pack of 1", "pack of 2", "pack of 4", "pack of 6", "pack of 12"),
    "coffee size": ("12 ounce", "1 pound", "2 pound", "32 ounce"),
    "oil size": ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "68 fl oz"),
    "shelf size": ("3 tier", "4 tier", "5 tier", "6 tier"),
    "bed size": ("twin", "full", "queen", "king"),
    "table size": ("small", "medium", "large"),
    "stool set": ("set of 1", "set of 2", "set of 3", "set of 4"),
    "rug size": ("2x3", "3x5", "4x6", "5x7", "8x10"),
}

_B = "Beauty & Personal Care"
_E = "Electronics"
_F = "Clothing, Shoes & Jewelry"
_G = "Grocery & Gourmet Food"
_H = "Home & Kitchen"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # --- beauty ------------------------------------------------------------------------------
    ProductType(
        "beauty", "shampoo", "Shampoo", "shampoo",
        f"{_B} › Hair Care › Shampoo & Conditioner › Shampoos",
        ("sulfate free", "paraben free", "tea tree", "argan oil", "natural ingredients", "dry hair",
         "hair growth", "color treated", "cruelty free", "coconut oil", "travel size", "dandruff control"),
        (("scent", "scent"), ("size", "liquid size")),
    ),
    ProductType(
        "beauty", "face moisturizer", "Face Moisturizer Cream", "face moisturizer",
        f"{_B} › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
        ("hyaluronic acid", "fine lines", "dark spots", "sensitive skin", "fragrance free", "vitamin c",
         "anti aging", "oil free", "non greasy", "dermatologist tested", "night cream", "shea butter"),
        (("size", "jar size"),),
    ),
    ProductType(
        "beauty", "nail polish", "Nail Polish", "nail polish",
        f"{_B} › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
        ("long lasting", "quick dry", "non toxic", "high gloss", "gel polish", "vegan formula",
         "chip resistant", "nail art", "glitter finish", "easy remove", "salon quality", "base coat"),
        (("color", "color"),),
    ),
    ProductType(
        "beauty", "hair extension", "Hair Extensions", "clip in hair extensions",
        f"{_B} › Hair Care › Hair Extensions, Wigs & Accessories › Hair Extensions",
        ("natural looking", "clip in", "heat resistant", "human hair", "synthetic hair", "long straight",
         "high quality", "easy wear", "hair loss", "full head", "thick hair", "body wave"),
        (("color", "hair color"), ("size", "hair length")),
    ),
    ProductType(
        "beauty", "makeup brush set", "Makeup Brush Set", "makeup brushes",
        f"{_B} › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
        ("synthetic bristles", "easy clean", "travel case", "eye shadow", "foundation brush",
         "soft bristles", "rose gold", "portable design", "dense bristles", "wooden handle",
         "kabuki brush", "blending sponge"),
        (("color", "color"),),
    ),
    ProductType(
        "beauty", "body wash", "Body Wash", "body wash",
        f"{_B} › Skin Care › Body › Cleansers › Body Washes",
        ("essential oils", "dry skin", "shea butter", "aloe vera", "moisturizing formula", "ph balanced",
         "sulfate free", "paraben free", "tea tree", "natural ingredients", "rich lather", "oat extract"),
        (("scent", "scent"), ("size", "liquid size")),
    ),
    # --- electronics -------------------------------------------------------------------------
    ProductType(
        "electronics", "wireless earbuds", "Wireless Earbuds", "wireless earbuds",
        f"{_E} › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
        ("noise cancelling", "wireless charging", "long battery life", "water resistant", "hands free",
         "touch control", "stereo sound", "built in microphone", "sweat proof", "deep bass",
         "charging case", "ear hooks"),
        (("color", "device color"),),
    ),
    ProductType(
        "electronics", "phone case", "Phone Case", "phone case",
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        ("shockproof protection", "slim fit", "screen protector", "kickstand design", "card holder",
         "drop protection", "raised edges", "anti scratch", "soft silicone", "clear back",
         "magnetic closure", "wrist strap"),
        (("color", "color"), ("style", "phone model")),
    ),
    ProductType(
        "electronics", "hdmi cable", "HDMI Cable", "hdmi cable",
        f"{_E} › Television & Video › Accessories › Cables › HDMI Cables",
        ("high speed", "gold plated", "4k hdr", "ethernet support", "braided nylon", "plug play",
         "flexible cable", "durable connector", "high definition", "fast transfer", "corrosion resistant",
         "ultra thin"),
        (("size", "cable length"),),
    ),
    ProductType(
        "electronics", "bluetooth speaker", "Bluetooth Speaker", "portable bluetooth speaker",
        f"{_E} › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
        ("waterproof design", "long battery life", "stereo sound", "deep bass", "built in microphone",
         "usb charging", "easy carry", "outdoor use", "led light", "high power", "party mode", "tws pairing"),
        (("color", "device color"),),
    ),
    ProductType(
        "electronics", "usb c charger", "USB C Charger", "usb c charger",
        f"{_E} › Computers & Accessories › Laptop Accessories › Chargers & Adapters",
        ("fast charging", "power delivery", "compact size", "travel friendly", "overheat protection",
         "dual port", "foldable plug", "universal compatibility", "led indicator", "gan technology",
         "short circuit protection", "braided cable"),
        (("color", "device color"), ("style", "wattage")),
    ),
    ProductType(
        "electronics", "tv wall mount", "TV Wall Mount", "tv wall mount",
        f"{_E} › Television & Video › Accessories › TV Mounts, Stands & Turntables › TV Wall & Ceiling Mounts",
        ("heavy duty", "easy install", "full motion", "tilt swivel", "steel frame", "cable management",
         "space saving", "quick release", "universal fit", "low profile", "stud mounting", "bubble level"),
        (("size", "tv size"),),
    ),
    # --- fashion -----------------------------------------------------------------------------
    ProductType(
        "fashion", "t-shirt", "T-Shirt", "men's t-shirts",
        f"{_F} › Men › Clothing › Shirts › T-Shirts",
        ("machine wash", "short sleeve", "crew neck", "slim fit", "cotton spandex", "moisture wicking",
         "quick drying", "soft material", "classic fit", "polyester cotton", "v neck", "pocket tee"),
        (("color", "color"), ("size", "clothing size")),
    ),
    ProductType(
        "fashion", "running shoes", "Running Shoes", "women's running shoes",
        f"{_F} › Women › Shoes › Athletic › Running",
        ("rubber sole", "non slip", "arch support", "memory foam", "lace up", "breathable mesh",
         "lightweight design", "shock absorption", "wide toe box", "cushioned insole", "walking shoes",
         "knit upper"),
        (("color", "color"), ("size", "shoe size")),
    ),
    ProductType(
        "fashion", "hoodie", "Hoodie Sweatshirt", "men's hoodies",
        f"{_F} › Men › Clothing › Fashion Hoodies & Sweatshirts",
        ("machine wash", "long sleeve", "fleece lined", "drawstring closure", "kangaroo pocket",
         "relaxed fit", "cotton blend", "zip up", "soft fabric", "winter warm", "ribbed cuffs", "heavy weight"),
        (("color", "color"), ("size", "clothing size")),
    ),
    ProductType(
        "fashion", "jeans", "Jeans", "women's jeans",
        f"{_F} › Women › Clothing › Jeans",
        ("high waist", "slim fit", "stretch denim", "button closure", "machine wash", "straight leg",
         "skinny fit", "butt lifting", "zipper fly", "distressed look", "ankle length", "wide leg"),
        (("color", "color"), ("size", "clothing size")),
    ),
    ProductType(
        "fashion", "dress", "Dress", "women's casual dresses",
        f"{_F} › Women › Clothing › Dresses › Casual",
        ("short sleeve", "long sleeve", "v neck", "floral print", "elastic waist", "midi length",
         "party wear", "flowy skirt", "side pockets", "summer dress", "soft fabric", "wrap style"),
        (("color", "color"), ("size", "clothing size")),
    ),
    ProductType(
        "fashion", "sandals", "Flat Sandals", "women's flat sandals",
        f"{_F} › Women › Shoes › Sandals › Flats",
        ("open toe", "ankle strap", "non slip", "rubber sole", "arch support", "memory foam",
         "adjustable buckle", "beach wear", "faux leather", "cushioned footbed", "slip on", "platform heel"),
        (("color", "color"), ("size", "shoe size")),
    ),
    # --- food --------------------------------------------------------------------------------
    ProductType(
        "food", "ground coffee", "Ground Coffee", "ground coffee",
        f"{_G} › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
        ("medium roast", "dark roast", "fair trade", "usda organic", "single origin", "low acid",
         "rich flavor", "arabica beans", "non gmo", "kosher certified", "small batch", "resealable bag"),
        (("flavor name", "coffee flavor"), ("size", "coffee size")),
    ),
    ProductType(
        "food", "protein bars", "Protein Bars", "protein bars",
        f"{_G} › Snack Foods › Bars › Protein Bars",
        ("gluten free", "low sugar", "high protein", "keto friendly", "plant based", "individually wrapped",
         "low carb", "grain free", "dairy free", "soy free", "whey protein", "meal replacement"),
        (("flavor name", "bar flavor"), ("size", "food pack")),
    ),
    ProductType(
        "food", "herbal tea", "Herbal Tea", "herbal tea",
        f"{_G} › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
        ("caffeine free", "usda organic", "tea bags", "loose leaf", "gluten free", "kosher certified",
         "sugar free", "calming blend", "immune support", "non gmo", "compostable bags", "whole leaf"),
        (("flavor name", "tea flavor"), ("size", "food pack")),
    ),
    ProductType(
        "food", "potato chips", "Potato Chips", "potato chips",
        f"{_G} › Snack Foods › Chips & Crisps › Potato Chips",
        ("gluten free", "kettle cooked", "non gmo", "low sodium", "vegan friendly", "single serve",
         "family size", "no preservatives", "plant based", "trans fat free", "avocado oil", "thick cut"),
        (("flavor name", "chip flavor"), ("size", "food pack")),
    ),
    ProductType(
        "food", "olive oil", "Extra Virgin Olive Oil", "olive oil",
        f"{_G} › Pantry Staples › Cooking Oils, Vinegars & Sprays › Oils › Olive",
        ("cold pressed", "usda organic", "non gmo", "glass bottle", "kosher certified", "single origin",
         "high polyphenol", "gluten free", "keto friendly", "first harvest", "greek olives", "dark bottle"),
        (("size", "oil size"),),
    ),
    ProductType(
        "food", "gummy candy", "Gummy Candy", "gummy candy",
        f"{_G} › Candy & Chocolate › Gummy Candy",
        ("fat free", "individually wrapped", "vegan friendly", "natural flavors", "real fruit",
         "party favors", "resealable bag", "gelatin free", "kosher certified", "sugar free",
         "low calorie", "gluten free"),
        (("flavor name", "candy flavor"), ("size", "food pack")),
    ),
    # --- furniture ---------------------------------------------------------------------------
    ProductType(
        "furniture", "office chair", "Office Chair", "office chair",
        f"{_H} › Furniture › Home Office Furniture › Home Office Chairs › Home Office Desk Chairs",
        ("lumbar support", "height adjustable", "swivel base", "easy assemble", "mesh back",
         "padded armrests", "heavy duty", "high back", "ergonomic design", "rolling casters",
         "pu leather", "tilt lock"),
        (("color", "color"),),
    ),
    ProductType(
        "furniture", "coffee table", "Coffee Table", "coffee table",
        f"{_H} › Furniture › Living Room Furniture › Tables › Coffee Tables",
        ("solid wood", "easy assemble", "storage shelf", "living room", "metal frame", "mid century",
         "rustic finish", "lift top", "space saving", "tempered glass", "round shape", "sturdy construction"),
        (("color", "wood color"), ("size", "table size")),
    ),
    ProductType(
        "furniture", "bookshelf", "Bookshelf", "bookshelf",
        f"{_H} › Furniture › Home Office Furniture › Bookcases",
        ("easy assemble", "storage space", "metal frame", "engineered wood", "living room",
         "industrial style", "anti tip", "open shelves", "space saving", "heavy duty",
         "adjustable shelves", "ladder design"),
        (("color", "wood color"), ("size", "shelf size")),
    ),
    ProductType(
        "furniture", "bed frame", "Bed Frame", "bed frame",
        f"{_H} › Furniture › Bedroom Furniture › Beds, Frames & Bases › Beds",
        ("metal platform", "noise free", "easy assemble", "under bed storage", "no box spring",
         "wooden slats", "heavy duty", "upholstered headboard", "tool free", "non slip",
         "sturdy construction", "modern design"),
        (("color", "wood color"), ("size", "bed size")),
    ),
    ProductType(
        "furniture", "bar stool", "Bar Stools", "bar stools",
        f"{_H} › Furniture › Kitchen & Dining Room Furniture › Stools › Barstools",
        ("swivel seat", "height adjustable", "back support", "pu leather", "footrest ring",
         "easy assemble", "counter height", "metal legs", "padded seat", "anti slip", "modern style",
         "kitchen island"),
        (("color", "color"), ("size", "stool set")),
    ),
    ProductType(
        "furniture", "area rug", "Area Rug", "area rug",
        f"{_H} › Home Décor Products › Area Rugs, Runners & Pads › Area Rugs",
        ("non slip", "machine washable", "soft touch", "living room", "stain resistant", "low pile",
         "shag rug", "bohemian style", "easy clean", "pet friendly", "high traffic", "fade resistant"),
        (("color", "color"), ("size", "rug size")),
    ),
)

CATEGORIES: tuple[str, ...] = ("beauty", "electronics", "fashion", "food", "furniture")

BRAND_HEADS = (
    "Zel", "Kor", "Van", "Mir", "Lun", "Tesh", "Or", "Bel", "Cas", "Dun", "Fen", "Gal", "Hol",
    "Jas", "Kel", "Nov", "Pax", "Quin", "Ros", "Sol", "Tav", "Ul", "Ves", "Wyn", "Yar",
)
BRAND_TAILS = ("ora", "ex", "ia", "ano", "ello", "ix", "ett", "um", "ara", "ity", "io", "en")

# Marketing words sprinkled into titles (never attributes, so they do not affect the reward).
TITLE_EXTRAS = ("Premium", "Classic", "Everyday", "Original", "Essential", "Signature", "Deluxe", "Pro")

# Instruction templates of generated goals, in the style of WebShop's human instructions.
# Fields: {noun}, {attrs} (attributes joined), {opts} (option phrase), {article}.
INSTRUCTION_TEMPLATES = (
    "i am looking for {article} {noun} that is {attrs}, {opts}",
    "i need {article} {noun} with {attrs}, {opts}",
    "find me {article} {attrs} {noun}, {opts}",
    "i want to buy {article} {noun} which is {attrs}, {opts}",
    "i would like {article} {attrs} {noun}, {opts}",
)
