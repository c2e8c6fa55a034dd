"""An answer's code is blanked before citations are looked for; its prose is kept."""

from __future__ import annotations

import pytest

from consumer.rules.markdown_code import prose


@pytest.mark.parametrize(
    ("answer", "kept", "gone"),
    [
        pytest.param("Paris is the capital [1].", ["[1]"], [], id="no-code"),
        pytest.param("Use `items[1]` for the second item [2].", ["[2]"], ["items[1]"],
                     id="inline-code"),
        pytest.param("Run ``a `b[1]` c`` then [2].", ["[2]"], ["b[1]"],
                     id="double-backtick-span-holding-a-backtick"),
        pytest.param("Sorted:\n```python\nxs = [1, 2, 3]\n```\nas documented [4].", ["[4]"],
                     ["[1, 2, 3]"], id="fenced-block"),
        pytest.param("~~~json\n{\"ids\": [1, 2]}\n~~~\nsee [3]", ["[3]"], ["[1, 2]"],
                     id="tilde-fence"),
        pytest.param("Example:\n   ```\n   a[1]\n   ```\n[2]", ["[2]"], ["a[1]"],
                     id="fence-indented-three-spaces"),
        pytest.param("```\ncode [1]\n``\nstill code [2]\n````\nprose [3]", ["[3]"],
                     ["[1]", "[2]"], id="closing-fence-must-be-as-long"),
        pytest.param("```\nfirst = argv[1]\nsecond = argv[2]", [], ["argv[1]", "argv[2]"],
                     id="unclosed-fence-runs-to-the-end"),
        pytest.param("It costs 5 ` coins [1].", ["[1]", "`"], [], id="lone-backtick-is-prose"),
        pytest.param("A ` here.\n\nNext paragraph [1] and ` there.", ["[1]"], [],
                     id="spans-do-not-cross-paragraphs"),
        pytest.param("Use ```arr[1]``` inline, cite [2].", ["[2]"], ["arr[1]"],
                     id="triple-backticks-inline"),
        pytest.param("```py `x` ```\n[1]", ["[1]"], ["`x`"],
                     id="backtick-in-info-string-is-inline-code-not-a-fence"),
    ],
)
def test_code_is_blanked_and_prose_kept(answer: str, kept: list[str], gone: list[str]) -> None:
    text = prose(answer)
    assert all(part in text for part in kept), text
    assert not any(part in text for part in gone), text


def test_text_either_side_of_code_does_not_join() -> None:
    assert "kb-12" not in prose("kb-`x`12")


@pytest.mark.parametrize(
    ("answer", "left"),
    [
        # Each run pairs with the next of its length, so every backtick is inside a span.
        pytest.param("` `` ``` " * 20_000 + "[1]", "[1]", id="backtick-runs-of-every-length"),
        # Fences open and close in turn: the text is all code blocks.
        pytest.param("```\n" * 20_000 + "```\n[1]", "", id="fence-lines-then-unclosed"),
        pytest.param("a" * 200_000 + "`", "a" * 200_000 + "`", id="long-line-one-backtick"),
    ],
)
def test_hostile_backticks_read_as_commonmark(answer: str, left: str) -> None:
    assert prose(answer).strip() == left
