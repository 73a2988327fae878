"""Pure functions that turn model output into verified scores.

Modules (each module docstring is its documentation page; nothing heavy is imported until used):

* :mod:`verifiers.extract`      code blocks, ``####`` answers, JSON, move lists, clipping
* :mod:`verifiers.math_answer`  final-answer extraction and grading (math-verify + NumEq)
* :mod:`verifiers.code_tests`   running programs against stdio / assert / differential tests in
  a sandbox (the plain runner and its records: :mod:`verifiers.plain_tests`; evalplus-style
  differential tests: :mod:`verifiers.diff_tests`)
* :mod:`verifiers.written_tests` reading model-written tests (stdio pairs, assert blocks)
* :mod:`verifiers.mutation`     AST mutants and the mutation score of a test suite
* :mod:`verifiers.judge`        LLM-judge score parsing; SAGE / MAE / CoMAS normalisations
* :mod:`verifiers.formats`      required-tag checks and soft format scores
* puzzle checks for the grid settings live in their own modules (e.g. ``verifiers.sudoku``)

Verifiers never import ``envs``; code execution goes through a sandbox passed in by the caller
(default ``sandboxes.default()``).
"""
