"""ALFRED vocabulary for generated households: room kinds, receptacles, objects, task types.

Type names are ALFRED's own (``CounterTop``, ``SinkBasin``, ``DeskLamp``...), so games render the
ALFWorld way (``countertop 2``, ``sinkbasin 1``, ``desklamp 1``). Which objects a receptacle may
hold (``canContain``) and which objects can be heated, cooled or cleaned come from the ``alfworld``
package itself (``alfworld.gen.constants``) when a game is written; the tables here only say what a
room of each kind is furnished with and where objects are usually found, and every placement is
checked against ALFRED's ``canContain`` table before it is used.
"""

from __future__ import annotations

# The six ALFWorld task types, in alfworld's own order (alfred_tw_env.TASK_TYPES 1..6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# ALFRED floor plan numbers of each room kind (constants.SCENE_TYPE).
ROOM_KINDS: tuple[str, ...] = ("Kitchen", "LivingRoom", "Bedroom", "Bathroom")
FLOOR_PLAN_BASE = {"Kitchen": 0, "LivingRoom": 200, "Bedroom": 300, "Bathroom": 400}
PLANS_PER_KIND = 30
# Floor plans 26..30 of each kind are held out for ``valid_unseen`` (ALFRED holds out whole
# scenes for its unseen split the same way); train and valid_seen use plans 1..25.
UNSEEN_PLAN_INDICES = range(26, 31)
SEEN_PLAN_INDICES = range(1, 26)

# In which room kinds ALFRED poses each task type (constants.GOALS_VALID).
TASK_ROOMS: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bedroom", "Bathroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
}

# Furniture of each room kind: receptacle type -> (min, max) count.
RECEPTACLES: dict[str, dict[str, tuple[int, int]]] = {
    "Kitchen": {
        "Cabinet": (3, 9),
        "CounterTop": (1, 3),
        "Drawer": (1, 6),
        "Fridge": (1, 1),
        "Microwave": (1, 1),
        "SinkBasin": (1, 1),
        "StoveBurner": (2, 4),
        "CoffeeMachine": (1, 1),
        "GarbageCan": (1, 1),
        "Toaster": (1, 1),
        "DiningTable": (0, 1),
        "Shelf": (0, 3),
    },
    "LivingRoom": {
        "Sofa": (1, 1),
        "ArmChair": (0, 2),
        "CoffeeTable": (1, 2),
        "SideTable": (1, 2),
        "TVStand": (0, 1),
        "Drawer": (0, 4),
        "Cabinet": (0, 4),
        "Shelf": (0, 5),
        "GarbageCan": (1, 1),
        "DiningTable": (0, 1),
        "Dresser": (0, 1),
        "Ottoman": (0, 1),
    },
    "Bedroom": {
        "Bed": (1, 1),
        "Desk": (0, 1),
        "Dresser": (0, 1),
        "SideTable": (1, 2),
        "Drawer": (2, 6),
        "Shelf": (0, 5),
        "GarbageCan": (1, 1),
        "LaundryHamper": (0, 1),
        "Safe": (0, 1),
        "ArmChair": (0, 1),
    },
    "Bathroom": {
        "Toilet": (1, 1),
        "SinkBasin": (1, 2),
        "BathtubBasin": (0, 1),
        "Cabinet": (1, 4),
        "CounterTop": (1, 1),
        "Drawer": (0, 4),
        "GarbageCan": (1, 1),
        "HandTowelHolder": (1, 2),
        "TowelHolder": (1, 1),
        "ToiletPaperHanger": (1, 1),
        "Shelf": (0, 2),
        "Cart": (0, 1),
    },
}

# Receptacles that open and close (constants.OPENABLE_CLASS_LIST, minus Box which is an object).
OPENABLE = frozenset({"Fridge", "Cabinet", "Microwave", "Drawer", "Safe"})

# Small objects found in each room kind (all pickupable).
OBJECTS: dict[str, tuple[str, ...]] = {
    "Kitchen": (
        "Apple",
        "Bowl",
        "Bread",
        "ButterKnife",
        "Cup",
        "DishSponge",
        "Egg",
        "Fork",
        "Glassbottle",
        "Kettle",
        "Knife",
        "Ladle",
        "Lettuce",
        "Mug",
        "Pan",
        "PepperShaker",
        "Plate",
        "Pot",
        "Potato",
        "SaltShaker",
        "SoapBottle",
        "Spatula",
        "Spoon",
        "Tomato",
        "WineBottle",
    ),
    "LivingRoom": (
        "Book",
        "Bowl",
        "Box",
        "Candle",
        "CellPhone",
        "CreditCard",
        "KeyChain",
        "Laptop",
        "Newspaper",
        "Pillow",
        "Plate",
        "RemoteControl",
        "Statue",
        "TissueBox",
        "Vase",
        "Watch",
        "WateringCan",
    ),
    "Bedroom": (
        "AlarmClock",
        "BaseballBat",
        "BasketBall",
        "Book",
        "Bowl",
        "Box",
        "CD",
        "CellPhone",
        "Cloth",
        "CreditCard",
        "KeyChain",
        "Laptop",
        "Mug",
        "Pen",
        "Pencil",
        "Pillow",
        "TennisRacket",
        "Watch",
    ),
    "Bathroom": (
        "Candle",
        "Cloth",
        "DishSponge",
        "HandTowel",
        "Plunger",
        "SoapBar",
        "SoapBottle",
        "SprayBottle",
        "TissueBox",
        "ToiletPaper",
        "Towel",
    ),
}

# Objects that can hold others in ALFRED (isReceptacleObject); informational in ALFWorld's rules.
RECEPTACLE_OBJECTS = frozenset({"Bowl", "Box", "Cup", "Mug", "Plate", "Pan", "Pot"})

# Light sources for look_at_obj_in_light (toggleable, not pickupable) and what they stand on.
LAMPS = ("DeskLamp", "FloorLamp")
LAMP_HOSTS: dict[str, tuple[str, ...]] = {
    "DeskLamp": ("Desk", "SideTable", "Dresser"),
    "FloorLamp": ("SideTable", "Dresser", "Desk", "Shelf", "CoffeeTable"),
}

# Receptacles that can never be the place a task asks for (they are tools of the task type, or
# ALFRED never uses them as the goal receptacle).
NOT_A_GOAL: dict[str, frozenset[str]] = {
    "pick_clean_then_place_in_recep": frozenset({"SinkBasin", "BathtubBasin"}),
    "pick_heat_then_place_in_recep": frozenset({"Microwave"}),
    "pick_cool_then_place_in_recep": frozenset({"Fridge"}),
}
NEVER_A_GOAL = frozenset({"Toaster", "CoffeeMachine", "StoveBurner", "TVStand"})

# Where an object is usually found, strongest first; placements prefer these receptacles (then
# any receptacle that ALFRED's canContain allows). Keeps households plausible (knives in drawers,
# apples on counters or in the fridge, towels on their holders).
USUAL_PLACES: dict[str, tuple[str, ...]] = {
    "Apple": ("CounterTop", "Fridge", "DiningTable", "GarbageCan", "SinkBasin"),
    "Bread": ("CounterTop", "DiningTable", "Fridge"),
    "Egg": ("Fridge", "CounterTop", "DiningTable", "GarbageCan"),
    "Lettuce": ("Fridge", "CounterTop", "DiningTable"),
    "Potato": ("CounterTop", "Fridge", "DiningTable", "GarbageCan", "SinkBasin"),
    "Tomato": ("CounterTop", "Fridge", "DiningTable", "SinkBasin", "GarbageCan"),
    "Knife": ("Drawer", "CounterTop", "DiningTable"),
    "ButterKnife": ("Drawer", "CounterTop", "DiningTable"),
    "Fork": ("Drawer", "CounterTop", "DiningTable", "SinkBasin"),
    "Spoon": ("Drawer", "CounterTop", "DiningTable", "SinkBasin"),
    "Spatula": ("Drawer", "CounterTop", "DiningTable"),
    "Ladle": ("Drawer", "CounterTop", "Cabinet", "DiningTable"),
    "Mug": ("CounterTop", "Cabinet", "CoffeeMachine", "Shelf", "SinkBasin", "Desk", "DiningTable"),
    "Cup": ("CounterTop", "Cabinet", "Fridge", "SinkBasin", "DiningTable"),
    "Bowl": ("Cabinet", "CounterTop", "Fridge", "Shelf", "DiningTable", "CoffeeTable", "Desk"),
    "Plate": ("Cabinet", "CounterTop", "Fridge", "DiningTable", "CoffeeTable", "Shelf"),
    "Pan": ("StoveBurner", "Cabinet", "CounterTop"),
    "Pot": ("StoveBurner", "Cabinet", "CounterTop", "Fridge"),
    "Kettle": ("StoveBurner", "CounterTop", "Cabinet"),
    "DishSponge": ("SinkBasin", "CounterTop", "Drawer", "Cabinet", "BathtubBasin", "Toilet", "Cart"),
    "SaltShaker": ("CounterTop", "Cabinet", "Drawer", "DiningTable", "Shelf"),
    "PepperShaker": ("CounterTop", "Cabinet", "Drawer", "DiningTable", "Shelf"),
    "SoapBottle": ("CounterTop", "Cabinet", "Toilet", "Shelf", "Drawer", "Cart"),
    "WineBottle": ("CounterTop", "Fridge", "Cabinet", "DiningTable"),
    "Glassbottle": ("CounterTop", "Cabinet", "Fridge", "DiningTable"),
    "Book": ("Shelf", "Desk", "Bed", "SideTable", "CoffeeTable", "Sofa", "Drawer", "Dresser"),
    "Box": ("Shelf", "CoffeeTable", "Sofa", "Dresser", "Desk", "SideTable"),
    "Candle": ("Toilet", "CounterTop", "Cabinet", "Shelf", "CoffeeTable", "SideTable", "Cart"),
    "CellPhone": ("Desk", "SideTable", "Bed", "Sofa", "Dresser", "Drawer", "CoffeeTable"),
    "CreditCard": ("Desk", "SideTable", "Drawer", "CoffeeTable", "Sofa", "ArmChair", "Dresser"),
    "KeyChain": ("SideTable", "Drawer", "CoffeeTable", "Dresser", "Desk", "Sofa", "Safe"),
    "Laptop": ("Desk", "Bed", "Sofa", "CoffeeTable", "DiningTable", "Dresser"),
    "Newspaper": ("CoffeeTable", "Sofa", "ArmChair", "SideTable", "DiningTable", "Ottoman"),
    "Pillow": ("Sofa", "ArmChair", "Bed", "Ottoman"),
    "RemoteControl": ("CoffeeTable", "Sofa", "SideTable", "ArmChair", "TVStand", "Dresser"),
    "Statue": ("Shelf", "CoffeeTable", "SideTable", "DiningTable", "Dresser", "Safe"),
    "TissueBox": ("CoffeeTable", "SideTable", "Toilet", "Shelf", "TVStand", "Dresser", "Cart"),
    "Vase": ("Shelf", "CoffeeTable", "SideTable", "DiningTable", "Safe"),
    "Watch": ("SideTable", "Drawer", "Dresser", "CoffeeTable", "Desk", "Safe"),
    "WateringCan": ("Shelf", "SideTable", "Drawer", "DiningTable"),
    "AlarmClock": ("Desk", "SideTable", "Dresser", "Shelf"),
    "BaseballBat": ("Bed", "Desk", "DiningTable"),
    "BasketBall": ("Bed", "Desk", "ArmChair"),
    "CD": ("Desk", "Drawer", "Shelf", "SideTable", "Safe", "GarbageCan"),
    "Cloth": ("Drawer", "LaundryHamper", "Dresser", "BathtubBasin", "Toilet", "Cabinet", "CounterTop"),
    "Pen": ("Desk", "Drawer", "SideTable", "Shelf", "Dresser"),
    "Pencil": ("Desk", "Drawer", "SideTable", "Shelf", "Dresser"),
    "TennisRacket": ("Bed", "Desk", "Dresser"),
    "HandTowel": ("HandTowelHolder",),
    "Towel": ("TowelHolder",),
    "Plunger": ("Cabinet", "Cart"),
    "SoapBar": ("BathtubBasin", "SinkBasin", "Toilet", "CounterTop", "Cabinet", "Drawer", "GarbageCan"),
    "SprayBottle": ("Toilet", "Cabinet", "CounterTop", "Shelf", "Drawer", "Cart"),
    "ToiletPaper": ("ToiletPaperHanger", "Toilet", "Cabinet", "CounterTop", "Shelf", "Drawer"),
}


def floor_plan_number(kind: str, index: int) -> int:
    """ALFRED's floor plan number: ``index`` 1..30 of room ``kind`` (Kitchen 1.., LivingRoom 201..)."""
    if kind not in FLOOR_PLAN_BASE:
        raise ValueError(f"unknown room kind {kind!r}; valid: {', '.join(ROOM_KINDS)}")
    if not 1 <= index <= PLANS_PER_KIND:
        raise ValueError(f"floor plan index must be in 1..{PLANS_PER_KIND}, got {index}")
    return FLOOR_PLAN_BASE[kind] + index
