"""What tests/ and bench/ share: functions loaded out of the pinned upstream's files, the DSv4 inputs built
for them, and ahead-of-time kernel compiles. One copy, imported by both (bench never imports tests/)."""
