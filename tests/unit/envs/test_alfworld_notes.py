"""The agent's notes in ALFWorld, on real feedback texts (hand-checked) and on real episodes."""

import pytest

from arl.envs.alfworld.notes import Notes, things

INTRO = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
         "a cabinet 2, a cabinet 1, a countertop 1, a fridge 1, a microwave 1, and a sinkbasin 1.\n\n"
         "Your task is to: put a hot apple in sinkbasin.")


def test_things():
    assert things("On the countertop 2, you see a bread 1, a apple 3, and an egg 2.") == ["bread 1", "apple 3", "egg 2"]
    assert things("you see nothing.") == []


def test_notes_follow_the_agents_own_observations():
    notes = Notes(INTRO, "put a hot apple in sinkbasin")
    assert notes.receptacles == ["cabinet 2", "cabinet 1", "countertop 1", "fridge 1", "microwave 1", "sinkbasin 1"]
    assert notes.render() == ("At: nowhere. Holding: nothing.\n"
                              "Not visited: cabinet 2, cabinet 1, countertop 1, fridge 1, microwave 1, sinkbasin 1.\n"
                              "Seen: nothing yet.")
    notes.update("You arrive at fridge 1. The fridge 1 is closed.")
    notes.update("You open the fridge 1. The fridge 1 is open. In it, you see a apple 2, a egg 1, and a lettuce 1.")
    notes.update("Nothing happens.")
    notes.update("You arrive at countertop 1. On the countertop 1, you see a apple 1, and a spoon 1.")
    assert notes.render().splitlines() == [
        "At: countertop 1. Holding: nothing.",
        "Not visited: cabinet 2, cabinet 1, microwave 1, sinkbasin 1.",
        "Seen: apple 2 (fridge 1), apple 1 (countertop 1).",  # only the task's objects, in the order first seen
    ]
    notes.update("You pick up the apple 1 from the countertop 1.")
    notes.update("You arrive at microwave 1. The microwave 1 is closed.")
    notes.update("You heat the apple 1 using the microwave 1.")
    assert notes.render().splitlines()[0] == "At: microwave 1. Holding: apple 1."
    assert notes.render().splitlines()[2] == "Seen: apple 2 (fridge 1)."  # the picked-up apple left the list
    notes.update("You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.")
    notes.update("You move the apple 1 to the sinkbasin 1.")
    assert notes.render().splitlines() == [
        "At: sinkbasin 1. Holding: nothing.",
        "Not visited: cabinet 2, cabinet 1.",
        "Seen: apple 2 (fridge 1), apple 1 (sinkbasin 1).",  # seen where it was put
    ]


@pytest.mark.parametrize("seed", [0, 3, 5, 10])  # generated games of four task types
def test_notes_on_real_expert_episodes(seed):
    pytest.importorskip("alfworld")
    from arl.envs.alfworld.env import AlfWorldEnv

    env = AlfWorldEnv(prompt_style="compact", notes=True, data_source="generated", num_games={"train": 12})
    try:
        obs, info = env.reset(seed)
        assert info["notes"].startswith("At: nowhere. Holding: nothing.")
        prompt = env.spec.render_prompt(obs, "", info)
        assert prompt.split("\n")[1:4] == info["notes"].split("\n")
        went, held = [], None
        for _ in range(50):
            command = env.expert_command()
            result = env.step(command)
            notes = result.info["notes"].split("\n")
            if command.startswith("go to "):
                went.append(command[len("go to "):])
                assert notes[0].startswith(f"At: {went[-1]}.")
            if command.startswith("take "):
                held = command.split(" from ")[0][len("take "):]
            if command.startswith("move "):
                held = None
            assert notes[0].endswith(f"Holding: {held or 'nothing'}.")
            assert not any(r in notes[1] for r in went)  # a place it went to is never "not visited"
            if result.done:
                break
        assert result.info["won"]
    finally:
        env.close()
    with pytest.raises(ValueError, match="notes=true needs prompt_style=compact"):
        AlfWorldEnv(prompt_style="full", notes=True)
