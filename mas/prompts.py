"""Prompts of the multi-agent systems, in one place so they can be read (and cited) together.

The suite's task prompt already says how to format the answer (`\\boxed{}`, a number or an option
letter); these prompts only add each agent's part in the protocol and repeat the format where an
agent writes a fresh solution.
"""

from __future__ import annotations

from mas.base import Task


def answer_format(task: Task) -> str:
    if task.kind == "choice":
        return "the letter of the option you choose inside \\boxed{}"
    return "the final answer inside \\boxed{}"


# --- mad: Multi-Agent Debate (Liang et al., EMNLP 2024) -----------------------------------------

MAD_AFFIRMATIVE_SYSTEM = (
    "You are the affirmative side of a debate about how to solve a problem. Present a careful, "
    "step-by-step solution and defend a clear answer. The goal is the correct answer, not winning: "
    "when the other side shows a real mistake in your work, correct it openly."
)

MAD_NEGATIVE_SYSTEM = (
    "You are the negative side of a debate about how to solve a problem. Check the affirmative "
    "side's solution independently, step by step, and argue against every error you find in its "
    "reasoning or arithmetic. Then give your own solution. Do not accept a claim you have not "
    "verified yourself, and do not invent disagreement where the other side is right."
)

MAD_MODERATOR_SYSTEM = (
    "You moderate a debate between an affirmative and a negative side about the solution of a "
    "problem. After each round, judge whether one side's answer is clearly correct. Reply with one "
    "JSON object and nothing else:\n"
    '{"preferred_side": "affirmative" or "negative" or "none", '
    '"answer": "the final answer of the preferred side, or an empty string", '
    '"reason": "one or two sentences"}\n'
    'Name a side and its answer only when you are confident; otherwise write "none" and an empty '
    "answer, and the debate continues."
)

MAD_JUDGE_SYSTEM = (
    "You judge a debate between an affirmative and a negative side about the solution of a "
    "problem. The debate ended without a decision. Read both sides' final positions, check their "
    "reasoning, and decide which side reached the correct answer. Reply with one JSON object and "
    'nothing else:\n{"winner": "affirmative" or "negative", "answer": "the winning final answer", '
    '"reason": "one or two sentences"}'
)


def mad_negative_first(task: Task, affirmative: str) -> str:
    return (
        f"{task.prompt}\n\nThe affirmative side's solution:\n{affirmative}\n\n"
        f"Check it step by step, argue against its errors, and give your own solution with "
        f"{answer_format(task)}."
    )


def mad_rebuttal(task: Task, other_side: str, other_text: str) -> str:
    return (
        f"The {other_side} side replied:\n{other_text}\n\n"
        f"Answer its arguments: point out what is wrong in them, or correct your own solution if "
        f"they are right. End with {answer_format(task)}."
    )


def mad_moderator_round(task: Task, round_number: int, affirmative: str, negative: str) -> str:
    problem = f"The problem:\n{task.prompt}\n\n" if round_number == 1 else ""
    return (
        f"{problem}Round {round_number} of the debate.\n\n"
        f"Affirmative side:\n{affirmative}\n\nNegative side:\n{negative}\n\n"
        "Give your verdict as the JSON object described."
    )


def mad_judge(task: Task, affirmative: str, negative: str) -> str:
    return (
        f"The problem:\n{task.prompt}\n\n"
        f"Final position of the affirmative side:\n{affirmative}\n\n"
        f"Final position of the negative side:\n{negative}\n\n"
        "Which side is correct? Give your decision as the JSON object described."
    )


# --- debate: LLM Debate (Du et al., 2023) ---------------------------------------------------------

DEBATE_AGENT_SYSTEM = (
    "You are one of several agents solving the same problem independently and then reviewing each "
    "other's solutions. Reason step by step."
)

DEBATE_AGGREGATOR_SYSTEM = (
    "You read several agents' solutions to one problem and write the single best final solution. "
    "Check the competing answers step by step; do not simply follow the majority."
)


def debate_revision(task: Task, others: list[tuple[str, str]]) -> str:
    shown = "\n\n".join(f"{name}'s solution:\n{text}" for name, text in others)
    return (
        f"Here are the latest solutions of the other agents:\n\n{shown}\n\n"
        "Compare them with your own solution step by step. Use their reasoning where it shows a "
        "mistake of yours, keep your answer where you find it correct, and give your updated "
        f"solution with {answer_format(task)}."
    )


def debate_aggregate(task: Task, solutions: list[tuple[str, str]]) -> str:
    shown = "\n\n".join(f"{name}'s final solution:\n{text}" for name, text in solutions)
    return (
        f"The problem:\n{task.prompt}\n\n{shown}\n\n"
        f"Write the correct final solution, ending with {answer_format(task)}."
    )


# --- autogen: a solver and a critic in an AutoGen round-robin team --------------------------------

AUTOGEN_SOLVER_SYSTEM = (
    "You are the solver in a two-agent team. Solve the user's problem step by step and end with "
    "{answer_format}. When the critic reports a problem, check its point and send a corrected, "
    "complete solution (again ending with {answer_format})."
)

AUTOGEN_CRITIC_SYSTEM = (
    "You are the critic in a two-agent team. Check the solver's latest solution step by step: the "
    "reading of the problem, every calculation, and whether the final answer is given as the "
    "problem asks. If you find a mistake, explain it briefly so the solver can fix it, and do not "
    "write the approval word. If the solution is correct, reply with a one-line confirmation that "
    "ends with the word {approval_word}. Never write {approval_word} in any other case."
)


# --- protocol=maslab: MASLab's versions of mad, debate and autogen (MASLab's repository) -------
# Same turns, same information in each turn and the same JSON keys as MASLab's code; the wording
# is ours. The topic / query is the suite's task prompt.

MASLAB_DEBATER_SYSTEM = (
    "You are a debater taking part in a debate. You do not have to agree with the other side's "
    "views: the aim of the debate is to find the correct answer.\nThe topic of the debate:\n"
    "{topic}"
)

MASLAB_MODERATOR_SYSTEM = (
    "You are the moderator of a debate between two debaters, who will give their answers and "
    'argue about this topic: "{topic}"\nAfter each round you evaluate their answers and decide '
    "which one is correct."
)


def maslab_negative_opening(affirmative: str) -> str:
    return f"{affirmative}\n\nYou disagree with my answer. Give your own answer and your reasons."


def maslab_rebuttal(other_side: str) -> str:
    return f"{other_side}\n\nDo you agree with my view? Give your reasons and your answer."


def maslab_moderator_round(ordinal: str, affirmative: str, negative: str) -> str:
    return (
        f"The {ordinal} round of the debate has now ended for both sides.\n\n"
        f"The affirmative side argued:\n{affirmative}\n\nThe negative side argued: {negative}\n\n"
        "As the moderator, evaluate both sides' answers and decide whether one answer candidate "
        "is clearly preferable. If so, summarise why you support the affirmative or the negative "
        "side and give the final answer you think is correct; the debate then ends. If not, the "
        "debate goes on to another round. Reply in JSON only, in this format: "
        '{"Whether there is a preference": "Yes or No", "Supported Side": "Affirmative or '
        'Negative", "Reason": "", "debate_answer": ""}. Write nothing but the JSON object.'
    )


def maslab_judge_candidates(affirmative: str, negative: str) -> str:
    return (
        f"The affirmative side argued: {affirmative}\n\nThe negative side argued: {negative}\n\n"
        "Which answer candidates are there? List them, without reasons."
    )


def maslab_judge_decision(topic: str) -> str:
    return (
        f"So: {topic}\nSummarise your reasons and give the final answer you think is correct. "
        'Reply in JSON only, in this format: {"Reason": "", "debate_answer": ""}. Write nothing '
        "but the JSON object."
    )


def maslab_debate_opening(query: str) -> str:
    return f"{query} State your answer at the end of your response."


def maslab_debate_revision(query: str, others: list[str]) -> str:
    if not others:  # a lone agent checks its own answer
        return (
            "Check that your answer is correct. Give your answer again, stating it at the end "
            "of your response."
        )
    shown = "".join(f"\n\n Another agent's response: ```{text}```" for text in others)
    return (
        f"These are the latest opinions of the other agents:{shown}\n\n Treat these opinions "
        "as extra advice and use them carefully: can you give an updated answer? State your "
        f"answer at the end of your response. \n The original problem: {query}."
    )


def maslab_debate_aggregate(query: str, solutions: list[str]) -> str:
    shown = "".join(f"Solution {index}:\n{text}\n\n" for index, text in enumerate(solutions, 1))
    return (
        f"Task:\n{query}\n\n{shown}Considering all of the solutions above, reason about them "
        "carefully and give a final answer to the task."
    )


MASLAB_ASSISTANT_SYSTEM = (
    "You are a helpful AI assistant.\nSolve tasks with your language skills.\nDo not write any "
    "code: solve the problem with your language skills as far as you can.\nSolve the task step "
    "by step if needed. If no plan is given, explain your plan first.\nWhen you find an answer, "
    "check it carefully, with verifiable evidence in your response where possible.\nEnd every "
    'response with the current final answer in a fixed format (such as "The final answer is" '
    "with the final answer in a box at the end), so that the answer is there even if the "
    'conversation is cut off.\nReply "TERMINATE" at the end when everything is done.'
)
