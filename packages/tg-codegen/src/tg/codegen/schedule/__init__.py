"""tg.codegen.schedule: tensor graph -> ordered kernels and copies (`create_schedule`)."""

from tg.codegen.schedule.item import KernelInfo, ScheduleItem
from tg.codegen.schedule.scheduler import create_schedule

__all__ = ["KernelInfo", "ScheduleItem", "create_schedule"]
