"""tg.codegen.schedule: tensor graph -> ordered kernels and copies (`create_schedule`)."""

from tg.codegen.schedule.item import ScheduleItem
from tg.codegen.schedule.scheduler import create_schedule

__all__ = ["ScheduleItem", "create_schedule"]
